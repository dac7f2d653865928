// K-quant matmul (q4_K, q5_K, q6_K): the integer contract's scalar reference against float
// arithmetic, and every ISA level against the reference, bitwise, at awkward sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/random.h"
#include "kernels/isa_testing.h"
#include "kernels/kquant.h"
#include "kernels/ops.h"

namespace koi::kernels {
namespace {

constexpr DType kTypes[] = {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::vector<float> random_floats(Rng& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = 2.0f * rng.uniform_f() - 1.0f;
  return v;
}

struct Weights {
  std::vector<uint8_t> bytes;
  TensorView view;
};

// Quantized from uniform values in [-1, 1).
Weights quantized_weights(Rng& rng, DType type, int64_t in, int64_t out) {
  Weights w;
  const std::vector<float> values = random_floats(rng, in * out);
  const int64_t row_bytes = dtype_row_bytes(type, in);
  w.bytes.resize(static_cast<size_t>(row_bytes * out));
  for (int64_t o = 0; o < out; ++o) quantize_row(type, values.data() + o * in, w.bytes.data() + o * row_bytes, in);
  w.view = make_view(type, {in, out}, w.bytes.data());
  return w;
}

// Random bytes everywhere except the fp16 super-block scales (kept finite): every quant, scale
// and min value the format can hold, extremes included.
Weights random_block_weights(Rng& rng, DType type, int64_t in, int64_t out) {
  Weights w;
  w.bytes.resize(static_cast<size_t>(dtype_row_bytes(type, in) * out));
  for (uint8_t& b : w.bytes) b = static_cast<uint8_t>(rng.below(256));
  const int64_t n_blocks = in / kQK_K * out;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint16_t d = f32_to_f16(0.01f * rng.uniform_f()), dmin = f32_to_f16(0.01f * rng.uniform_f());
    if (type == DType::kQ6_K) {
      reinterpret_cast<BlockQ6_K*>(w.bytes.data())[b].d = d;
    } else if (type == DType::kQ4_K) {
      auto& blk = reinterpret_cast<BlockQ4_K*>(w.bytes.data())[b];
      blk.d = d, blk.dmin = dmin;
    } else {
      auto& blk = reinterpret_cast<BlockQ5_K*>(w.bytes.data())[b];
      blk.d = d, blk.dmin = dmin;
    }
  }
  w.view = make_view(type, {in, out}, w.bytes.data());
  return w;
}

// The activations the contract multiplies: x through q8_K.
std::vector<float> q8k_rounded(const std::vector<float>& x, int64_t in) {
  std::vector<float> out(x.size());
  std::vector<BlockQ8_K> blocks(static_cast<size_t>(in / kQK_K));
  for (size_t row = 0; row < x.size() / in; ++row) {
    quantize_row_q8_K(x.data() + row * in, blocks.data(), in);
    dequantize_row_q8_K(blocks.data(), out.data() + row * in, in);
  }
  return out;
}

// Largest over tokens of ||y - ref|| / ||scale|| with scale[t, o] = sqrt(sum_i (w[o, i] x[t, i])^2),
// as in matmul_test.cc.
double max_row_error(const TensorView& w, const std::vector<float>& x, const std::vector<float>& y,
                     const std::vector<float>& ref) {
  const int64_t in = w.ne[0], out = w.ne[1];
  std::vector<float> w_row(static_cast<size_t>(in));
  std::vector<double> scale2(y.size());
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(w.type, w.row(o), w_row.data(), in);
    for (size_t t = 0; t < y.size() / out; ++t) {
      for (int64_t i = 0; i < in; ++i) {
        const double p = static_cast<double>(w_row[i]) * x[t * in + i];
        scale2[t * out + o] += p * p;
      }
    }
  }
  double worst = 0.0;
  for (size_t t = 0; t < y.size() / out; ++t) {
    double err = 0.0, norm = 0.0;
    for (int64_t o = 0; o < out; ++o) {
      const double d = static_cast<double>(y[t * out + o]) - ref[t * out + o];
      err += d * d;
      norm += scale2[t * out + o];
    }
    worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

// Tolerances, as max_row_error. The integer contract against ref::matmul (double sums) over the
// same q8_K activations differs only by the float rounding of a few fmas per super-block and of
// float(isum): 1e-5. Against the unrounded activations, q8_K's step max|x| / 127 over 256 values
// of uniform x in [-1, 1) gives an error of 2.3e-3 of the rms activation on average, so 5x that,
// as matmul_test.cc's q8 bound: 2e-2.
constexpr double kSummationTolerance = 1e-5;
constexpr double kQ8KActivationTolerance = 2e-2;

TEST(KQuantMatmul, ReferenceIsTheFloatDotOfItsOperands) {
  Rng rng(17);
  for (DType type : kTypes) {
    for (bool random_blocks : {false, true}) {
      SCOPED_TRACE(testing::Message() << dtype_name(type) << (random_blocks ? " random blocks" : " quantized"));
      const int64_t in = 768, out = 24, n_tokens = 3;
      Weights w = random_blocks ? random_block_weights(rng, type, in, out) : quantized_weights(rng, type, in, out);
      const std::vector<float> x = random_floats(rng, n_tokens * in);
      std::vector<float> y(n_tokens * out), ref(y.size());
      ref::kquant_matmul(w.view, x.data(), y.data(), n_tokens);
      ref::matmul(w.view, q8k_rounded(x, in).data(), ref.data(), n_tokens);
      EXPECT_LT(max_row_error(w.view, x, y, ref), kSummationTolerance);
      ref::matmul(w.view, x.data(), ref.data(), n_tokens);
      EXPECT_LT(max_row_error(w.view, x, y, ref), kQ8KActivationTolerance);
    }
  }
}

// Every SIMD level gives ref::kquant_matmul's bits for every row and token, whatever the batch
// (1, 3 and 7 tokens: the decode path, 7 its largest tile; 17 and 70: the prefill panels, full and
// partial token tiles), the number of rows (partial 8-row decode groups and row tiles, odd splits
// across threads) and the thread count; the portable level (dequantize and dot) agrees within
// kQ8KActivationTolerance.
TEST(KQuantMatmul, EveryLevelMatchesTheReference) {
  Rng rng(23);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (DType type : kTypes) {
      for (int64_t in : {256, 768, 2304}) {
        for (int64_t n_tokens : {1, 3, 7, 17, 70}) {
          for (int64_t out : {1, 7, 33, 100}) {
            for (bool random_blocks : {false, true}) {
              SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " in " << in
                                              << " n_tokens " << n_tokens << " out " << out
                                              << (random_blocks ? " random blocks" : ""));
              Weights w = random_blocks ? random_block_weights(rng, type, in, out) : quantized_weights(rng, type, in, out);
              const std::vector<float> x = random_floats(rng, n_tokens * in);
              std::vector<float> ref(static_cast<size_t>(n_tokens * out));
              ref::kquant_matmul(w.view, x.data(), ref.data(), n_tokens);
              for (int threads : {1, 3}) {
                ThreadPool pool(threads);
                std::vector<float> y(ref.size());
                matmul(w.view, x.data(), y.data(), n_tokens, &pool);
                if (isa == Isa::kPortable) {
                  EXPECT_LT(max_row_error(w.view, x, y, ref), kQ8KActivationTolerance);
                } else {
                  ASSERT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * sizeof(float))) << threads << " threads";
                }
              }
            }
          }
        }
      }
    }
  }
}

// The extremes of the integer ranges: every quant at its largest value against activations that
// all quantize to +-127 (the maddubs pair sums and int32 sums at their bounds, no saturation), in
// decode (1 token) and in the prefill panels (9 and 20 tokens, 3 rows).
TEST(KQuantMatmul, LargestIntegerSumsAreExact) {
  const int64_t in = 512, out = 3;
  for (int64_t n_tokens : {1, 9, 20}) {
    std::vector<float> x(in * n_tokens);
    for (int64_t i = 0; i < in * n_tokens; ++i) x[i] = (i % in) % 3 == 0 ? -1.0f : 1.0f;
    for (DType type : kTypes) {
      SCOPED_TRACE(testing::Message() << dtype_name(type) << " n_tokens " << n_tokens);
      Weights w;
      const int64_t row_bytes = dtype_row_bytes(type, in);
      w.bytes.assign(static_cast<size_t>(row_bytes * out), 0xFF);
      for (int64_t b = 0; b < in / kQK_K * out; ++b) {
        if (type == DType::kQ6_K) {
          auto& blk = reinterpret_cast<BlockQ6_K*>(w.bytes.data())[b];
          blk.d = f32_to_f16(1.0f);
          std::memset(blk.scales, 0x80, sizeof(blk.scales));  // -128
        } else {
          auto* d = reinterpret_cast<uint16_t*>(w.bytes.data() + b * dtype_block_bytes(type));
          d[0] = d[1] = f32_to_f16(1.0f);  // d, dmin
        }
      }
      w.view = make_view(type, {in, out}, w.bytes.data());
      std::vector<float> ref(static_cast<size_t>(out * n_tokens));
      ref::kquant_matmul(w.view, x.data(), ref.data(), n_tokens);
      std::vector<float> deq(in);
      dequantize_row(type, w.bytes.data(), deq.data(), in);
      double exact = 0;
      for (int64_t i = 0; i < in; ++i) exact += static_cast<double>(deq[i]) * (x[i] > 0 ? 127 : -127) / 127.0;
      for (float r : ref) EXPECT_NEAR(r, exact, std::fabs(exact) * 1e-6);
      for (Isa isa : levels()) {
        ScopedIsa scoped(isa);
        std::vector<float> y(ref.size());
        matmul(w.view, x.data(), y.data(), n_tokens, nullptr);
        for (size_t i = 0; i < y.size(); ++i) {
          if (isa == Isa::kPortable) {
            EXPECT_NEAR(y[i], ref[i], std::fabs(exact) * 1e-6) << isa_name(isa);
          } else {
            ASSERT_EQ(y[i], ref[i]) << isa_name(isa) << " value " << i;
          }
        }
      }
    }
  }
}

// The SIMD q8_K quantizer writes the scalar one's bytes: random blocks at several magnitudes,
// halves that round to even (max -127 gives iscale 1), +a and -a both of largest magnitude (the
// first wins), an all-zero block and a NaN (skipped).
TEST(KQuantMatmul, SimdQ8KQuantizerIsTheScalarOne) {
  if (detected_isa() < Isa::kAvx2) return;  // the SIMD levels (the only callers) cannot run here either
  Rng rng(41);
  std::vector<float> x;
  for (float scale : {1e-6f, 1.0f, 3e4f}) {
    for (int i = 0; i < 4 * kQK_K; ++i) x.push_back(scale * static_cast<float>(rng.normal()));
  }
  for (int i = 0; i < kQK_K; ++i) x.push_back(i == 7 ? -127.0f : static_cast<float>(i % 120) - 60.5f);
  for (int i = 0; i < kQK_K; ++i) x.push_back(i == 3 ? -2.0f : i == 9 ? 2.0f : 0.01f * static_cast<float>(i));
  for (int i = 0; i < kQK_K; ++i) x.push_back(i == 3 ? 2.0f : i == 9 ? -2.0f : -0.01f * static_cast<float>(i));
  x.insert(x.end(), kQK_K, 0.0f);
  for (int i = 0; i < kQK_K; ++i) x.push_back(i == 5 ? std::nanf("") : 0.5f - 0.003f * static_cast<float>(i));
  const int64_t n = static_cast<int64_t>(x.size());
  std::vector<BlockQ8_K> scalar(static_cast<size_t>(n / kQK_K)), simd(scalar.size());
  quantize_row_q8_K(x.data(), scalar.data(), n);
  avx2::quantize_row_q8_K(x.data(), simd.data(), n);
  for (size_t b = 0; b < scalar.size(); ++b) {
    EXPECT_EQ(0, std::memcmp(&scalar[b], &simd[b], sizeof(BlockQ8_K))) << "block " << b;
  }
}

// A prefill longer than one pass of the panels (512 tokens) and the same tokens one at a time
// (decode) give the same bits at every level: batch invariance across both paths.
TEST(KQuantMatmul, PrefillPassesEqualDecodeBitwise) {
  Rng rng(31);
  const int64_t in = 512, out = 37, n_tokens = 530;
  for (DType type : kTypes) {
    Weights w = quantized_weights(rng, type, in, out);
    const std::vector<float> x = random_floats(rng, n_tokens * in);
    for (Isa isa : levels()) {
      if (isa == Isa::kPortable) continue;
      SCOPED_TRACE(testing::Message() << dtype_name(type) << " " << isa_name(isa));
      ScopedIsa scoped(isa);
      ThreadPool pool(2);
      std::vector<float> batch(static_cast<size_t>(n_tokens * out)), one(batch.size());
      matmul(w.view, x.data(), batch.data(), n_tokens, &pool);
      for (int64_t t = 0; t < n_tokens; ++t) matmul(w.view, x.data() + t * in, one.data() + t * out, 1, &pool);
      ASSERT_EQ(0, std::memcmp(batch.data(), one.data(), batch.size() * sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace koi::kernels
