// matmul at every ISA level this CPU has, against ref::matmul, and its determinism contract.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "base/random.h"
#include "kernels/isa_testing.h"
#include "kernels/ops.h"
#include "kernels/packed_matrix.h"
#include "kernels/simd.h"

namespace koi::kernels {
namespace {

constexpr DType kTypes[] = {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0};

bool quantized(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0; }

std::vector<float> random_floats(Rng& rng, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (float& f : v) f = 2.0f * rng.uniform_f() - 1.0f;
  return v;
}

// out rows of in values of type `type`, from uniform values in [-1, 1).
struct Weights {
  std::vector<uint8_t> bytes;
  TensorView view;
};
Weights random_weights(Rng& rng, DType type, int64_t in, int64_t out) {
  Weights w;
  std::vector<float> values = random_floats(rng, in * out);
  w.bytes.resize(static_cast<size_t>(dtype_row_bytes(type, in) * out));
  for (int64_t o = 0; o < out; ++o) {
    quantize_row(type, values.data() + o * in, w.bytes.data() + o * dtype_row_bytes(type, in), in);
  }
  w.view = make_view(type, {in, out}, w.bytes.data());
  return w;
}

// The activations the kernel at `isa` actually multiplies: q8 blocks for quantized weights and
// bf16-rounded values for bf16 weights at avx512bf16 (see activation_type() in ops.cc).
// `n_tokens` rows of x ([n_tokens, in]) multiplied one token per call: the decode result every
// batch must equal bitwise.
std::vector<float> one_token_at_a_time(const TensorView& w, const std::vector<float>& x, int64_t in, int64_t out,
                                       int64_t n_tokens) {
  std::vector<float> y(static_cast<size_t>(n_tokens * out));
  for (int64_t t = 0; t < n_tokens; ++t) matmul(w, x.data() + t * in, y.data() + t * out, 1, nullptr);
  return y;
}

std::vector<float> effective_x(Isa isa, DType type, const std::vector<float>& x, int64_t in) {
  std::vector<float> out = x;
  if (isa != Isa::kPortable && quantized(type)) {
    std::vector<ActBlockQ8> blocks(static_cast<size_t>(in / 32));
    for (size_t row = 0; row < x.size() / in; ++row) {
      avx2::quantize_row_q8(x.data() + row * in, blocks.data(), in);
      for (int64_t i = 0; i < in; ++i) out[row * in + i] = blocks[i / 32].qs[i % 32] * blocks[i / 32].d;
    }
  } else if (isa == Isa::kAvx512Bf16 && type == DType::kBF16) {
    for (float& f : out) f = bf16_to_f32(f32_to_bf16(f));
  }
  return out;
}

// Largest over token rows of ||y - ref|| / ||scale||, where scale[t, o] = sqrt(sum_i (w[o, i] x[t, i])^2)
// is the typical size of a dot of independent terms (||ref|| itself can be near 0 by chance when
// a row has one or a few outputs).
double max_row_error(const TensorView& w, const std::vector<float>& x, const std::vector<float>& y,
                     const std::vector<float>& ref) {
  const int64_t in = w.ne[0], out = w.ne[1];
  std::vector<float> w_row(static_cast<size_t>(in));
  std::vector<double> scale2(y.size());
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(w.type, w.row(o), w_row.data(), in);
    for (size_t t = 0; t < y.size() / out; ++t) {
      for (int64_t i = 0; i < in; ++i) {
        double p = static_cast<double>(w_row[i]) * x[t * in + i];
        scale2[t * out + o] += p * p;
      }
    }
  }
  double worst = 0.0;
  for (size_t t = 0; t < y.size() / out; ++t) {
    double err = 0.0, norm = 0.0;
    for (int64_t o = 0; o < out; ++o) {
      double d = static_cast<double>(y[t * out + o]) - ref[t * out + o];
      err += d * d;
      norm += scale2[t * out + o];
    }
    worst = std::max(worst, std::sqrt(err / norm));
  }
  return worst;
}

// Tolerances, as max_row_error:
// - against ref::matmul over the activations the kernel multiplies (effective_x): only the f32
//   summation order differs, a few ulp times sqrt(in) at these sizes: 1e-5.
// - against ref::matmul over the f32 activations, where the kernel rounds them: q8 with an f32
//   scale d = max|x| / 127 rounds each value by at most d / 2, uniformly, so for x uniform in
//   [-1, 1) the rounding has std d / sqrt(12) = 2.3e-3 against an activation rms of 0.577, and the
//   output is off by 4e-3 of its scale on average. bf16 keeps 8 significant bits: an error of
//   about 2^-9 / sqrt(3) = 1.1e-3. A row of one output is one normal sample of that error, and
//   the test draws a few thousand, so the bounds sit at 5x the average.
constexpr double kSummationTolerance = 1e-5;
constexpr double kQ8ActivationTolerance = 2e-2;
constexpr double kBf16ActivationTolerance = 6e-3;

TEST(Matmul, MatchesReferenceAtEveryLevel) {
  Rng rng(42);
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (DType type : kTypes) {
      const std::vector<int64_t> ins =
          quantized(type) ? std::vector<int64_t>{32, 96, 320} : std::vector<int64_t>{67, 131, 256};
      for (int64_t in : ins) {
        for (int64_t n_tokens : {1, 3, 17, 64}) {
          for (int64_t out : {1, 7, 33, 100}) {
            SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " in "
                                            << in << " n_tokens " << n_tokens << " out " << out);
            Weights w = random_weights(rng, type, in, out);
            std::vector<float> x = random_floats(rng, n_tokens * in);
            std::vector<float> y(static_cast<size_t>(n_tokens * out));
            matmul(w.view, x.data(), y.data(), n_tokens, &pool);

            std::vector<float> ref(y.size());
            ref::matmul(w.view, effective_x(isa, type, x, in).data(), ref.data(), n_tokens);
            EXPECT_LT(max_row_error(w.view, x, y, ref), kSummationTolerance);

            ref::matmul(w.view, x.data(), ref.data(), n_tokens);
            double tolerance = kSummationTolerance;
            if (isa != Isa::kPortable && quantized(type)) tolerance = kQ8ActivationTolerance;
            if (isa == Isa::kAvx512Bf16 && type == DType::kBF16) tolerance = kBf16ActivationTolerance;
            EXPECT_LT(max_row_error(w.view, x, y, ref), tolerance);
          }
        }
      }
    }
  }
}

TEST(Matmul, QuantizedActivationErrorIsAsPredicted) {
  // The 4e-3 estimate behind kQ8ActivationTolerance, checked on a TinyLlama-sized row.
  if (detected_isa() == Isa::kPortable) GTEST_SKIP() << "no SIMD level on this CPU";
  Rng rng(7);
  Weights w = random_weights(rng, DType::kQ8_0, 2048, 64);
  std::vector<float> x = random_floats(rng, 2048), y(64), ref(64);
  matmul(w.view, x.data(), y.data(), 1, nullptr);
  ref::matmul(w.view, x.data(), ref.data(), 1);
  const double error = max_row_error(w.view, x, y, ref);
  EXPECT_GT(error, 3e-3);
  EXPECT_LT(error, 5e-3);
}

// A token's output row is bitwise the same whatever the batch around it and the thread count.
// 37 tokens: prefill tiles of every width; 600: more than one prefill pass over the rows
// (kQuantTokenChunk); 101 rows: full and partial row tiles, split differently across threads.
TEST(Matmul, RowsAreBitwiseIndependentOfBatchAndThreads) {
  Rng rng(3);
  constexpr int64_t kOut = 101;
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (DType type : kTypes) {
      for (int64_t n_tokens : {37, 600}) {
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " " << n_tokens << " tokens");
        const int64_t in = quantized(type) ? 320 : 331;
        Weights w = random_weights(rng, type, in, kOut);
        std::vector<float> x = random_floats(rng, n_tokens * in);
        const std::vector<float> alone = one_token_at_a_time(w.view, x, in, kOut, n_tokens);
        for (int threads : {1, 2, 3}) {
          ThreadPool pool(threads);
          std::vector<float> batched(alone.size());
          matmul(w.view, x.data(), batched.data(), n_tokens, &pool);
          EXPECT_EQ(0, std::memcmp(batched.data(), alone.data(), alone.size() * sizeof(float))) << threads << " threads";
          std::vector<float> single(static_cast<size_t>(kOut));
          matmul(w.view, x.data() + 5 * in, single.data(), 1, &pool);
          EXPECT_EQ(0, std::memcmp(single.data(), alone.data() + 5 * kOut, kOut * sizeof(float)))
              << threads << " threads, 1 token";
        }
      }
    }
  }
}

// Batched decode (2-64 tokens) takes the small-batch tiles (weights read as stored) up to a few
// tokens and the panels beyond: at rows that leave partial 16- and 8-row tiles (53 on one thread:
// a tile of two panels whose second holds 5 rows) and at every token count around the tile widths, each token's row is bitwise its one-token result, and close to
// ref::matmul over the activations the kernel multiplies.
TEST(Matmul, QuantizedSmallBatchesAreDecodeBitwise) {
  Rng rng(5);
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
      for (int64_t out : {37, 53, 101}) {
        constexpr int64_t kIn = 320;
        Weights w = random_weights(rng, type, kIn, out);
        for (int64_t n_tokens : {2, 3, 4, 5, 17, 33, 64}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " out " << out << " "
                                          << n_tokens << " tokens");
          std::vector<float> x = random_floats(rng, n_tokens * kIn);
          const std::vector<float> alone = one_token_at_a_time(w.view, x, kIn, out, n_tokens);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            std::vector<float> batched(alone.size());
            matmul(w.view, x.data(), batched.data(), n_tokens, p);
            EXPECT_EQ(0, std::memcmp(batched.data(), alone.data(), alone.size() * sizeof(float)))
                << (p ? "2 threads" : "1 thread");
          }
          std::vector<float> ref(alone.size());
          ref::matmul(w.view, effective_x(isa, type, x, kIn).data(), ref.data(), n_tokens);
          EXPECT_LT(max_row_error(w.view, x, alone, ref), kSummationTolerance);
        }
      }
    }
  }
}

// Weights packed once (PackedMatrix) take the panels at every batch size, 1 token included: each
// token's row is bitwise its one-token result on the weights as stored, at every level, for 1, 2
// and 3 threads, at rows that leave a partial last panel (37, 53) and several per thread (101),
// and past one pass over the rows (600 tokens). The panels take the file's bytes, padded to 16 rows.
TEST(Matmul, PackedWeightsGiveTheStoredWeightsResultBitwise) {
  Rng rng(13);
  std::vector<std::unique_ptr<ThreadPool>> pools;
  for (int threads : {1, 2, 3}) pools.push_back(std::make_unique<ThreadPool>(threads));
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t out : {37, 53, 101}) {
      constexpr int64_t kIn = 320;
      Weights w = random_weights(rng, type, kIn, out);
      const PackedMatrix packed(w.view, pools[1].get());
      if (detected_isa() != Isa::kPortable) {
        ASSERT_NE(packed.panels(), nullptr);
        EXPECT_EQ(packed.packed_bytes(), (out + 15) / 16 * 16 * w.view.row_bytes());
        EXPECT_EQ(0, std::memcmp(packed.panels(), PackedMatrix(w.view).panels(), static_cast<size_t>(packed.packed_bytes())))
            << "packing on 2 threads and on the caller's differ";
      }
      for (Isa isa : levels()) {
        ScopedIsa scoped(isa);
        for (int64_t n_tokens : {1, 2, 3, 4, 5, 8, 17, 33, 64, 600}) {
          SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(type) << " out " << out << " "
                                          << n_tokens << " tokens");
          std::vector<float> x = random_floats(rng, n_tokens * kIn);
          const std::vector<float> alone = one_token_at_a_time(w.view, x, kIn, out, n_tokens);
          for (const auto& pool : pools) {
            std::vector<float> y(alone.size());
            matmul(packed, x.data(), y.data(), n_tokens, pool.get());
            EXPECT_EQ(0, std::memcmp(y.data(), alone.data(), alone.size() * sizeof(float)))
                << pool->num_threads() << " threads";
          }
        }
      }
    }
  }
}

// Several matrices over one input (q, k, v; gate, up) in one call: each output is bitwise what
// its own call gives, whether the matrices share one parallel region (panels of one type, groups
// that end mid-panel and ranges that cross from one matrix into the next) or are run one by one
// (mixed types, float weights without panels).
TEST(Matmul, SeveralMatricesOverOneInputGiveEachOnesResultBitwise) {
  Rng rng(19);
  constexpr int64_t kIn = 320;
  const std::vector<std::vector<std::pair<DType, int64_t>>> groups = {
      {{DType::kQ8_0, 37}, {DType::kQ8_0, 256}, {DType::kQ8_0, 53}},
      {{DType::kQ4_0, 101}, {DType::kQ4_0, 16}},
      {{DType::kQ8_0, 40}, {DType::kQ4_0, 24}},
      {{DType::kF16, 24}, {DType::kQ8_0, 33}},
  };
  ThreadPool pool(2);
  for (const auto& group : groups) {
    std::vector<Weights> weights;
    std::vector<PackedMatrix> packed;
    for (auto [type, out] : group) weights.push_back(random_weights(rng, type, kIn, out));
    for (const Weights& w : weights) packed.emplace_back(w.view);
    std::vector<const PackedMatrix*> w_ptrs;
    for (const PackedMatrix& p : packed) w_ptrs.push_back(&p);
    for (Isa isa : levels()) {
      ScopedIsa scoped(isa);
      for (int64_t n_tokens : {1, 3, 32, 600}) {
        SCOPED_TRACE(testing::Message() << isa_name(isa) << " " << dtype_name(group[0].first) << " x"
                                        << group.size() << " " << n_tokens << " tokens");
        const std::vector<float> x = random_floats(rng, n_tokens * kIn);
        std::vector<std::vector<float>> together(group.size()), alone(group.size());
        std::vector<float*> outs;
        for (size_t i = 0; i < group.size(); ++i) {
          together[i].assign(static_cast<size_t>(n_tokens * group[i].second), -1.0f);
          alone[i].resize(together[i].size());
          outs.push_back(together[i].data());
          matmul(packed[i], x.data(), alone[i].data(), n_tokens, &pool);
        }
        matmul(w_ptrs, x.data(), outs, n_tokens, &pool);
        for (size_t i = 0; i < group.size(); ++i) {
          EXPECT_EQ(0, std::memcmp(together[i].data(), alone[i].data(), alone[i].size() * sizeof(float)))
              << "matrix " << i;
        }
      }
    }
  }
}

// Float weights keep their view: no panels, the view's result.
TEST(Matmul, PackedFloatWeightsAreReadAsStored) {
  Rng rng(17);
  Weights w = random_weights(rng, DType::kF16, 64, 24);
  const PackedMatrix packed(w.view);
  EXPECT_EQ(packed.panels(), nullptr);
  EXPECT_EQ(packed.packed_bytes(), 0);
  std::vector<float> x = random_floats(rng, 3 * 64), y(3 * 24), expected(3 * 24);
  matmul(packed, x.data(), y.data(), 3, nullptr);
  matmul(w.view, x.data(), expected.data(), 3, nullptr);
  EXPECT_EQ(y, expected);
}

TEST(Matmul, IntegerDotsAgreeBitwiseAcrossLevels) {
  // Both levels compute each block's exact integer dot (vpdpbusd at AVX-512, maddubs at AVX2, in
  // tiles of 16 and 8 rows) and the same float sequence over the blocks: decode (1 token), small
  // batches (2, 3) and prefill (5 tokens) agree bitwise, on full and partial row tiles (40 rows).
  if (detected_isa() < Isa::kAvx512) GTEST_SKIP() << "needs AVX-512 VNNI";
  Rng rng(11);
  for (DType type : {DType::kQ8_0, DType::kQ4_0}) {
    for (int64_t n_tokens : {1, 2, 3, 5}) {
      Weights w = random_weights(rng, type, 512, 40);
      std::vector<float> x = random_floats(rng, n_tokens * 512), y2(n_tokens * 40), y512(n_tokens * 40);
      {
        ScopedIsa scoped(Isa::kAvx2);
        matmul(w.view, x.data(), y2.data(), n_tokens, nullptr);
      }
      {
        ScopedIsa scoped(Isa::kAvx512);
        matmul(w.view, x.data(), y512.data(), n_tokens, nullptr);
      }
      EXPECT_EQ(0, std::memcmp(y2.data(), y512.data(), y2.size() * sizeof(float)))
          << dtype_name(type) << " " << n_tokens << " tokens";
    }
  }
}

TEST(Isa, SetIsaClampsToTheDetectedLevel) {
  ScopedIsa scoped(Isa::kAvx512Bf16);
  EXPECT_EQ(active_isa(), detected_isa());
  set_isa(Isa::kPortable);
  EXPECT_EQ(active_isa(), Isa::kPortable);
  EXPECT_EQ(isa_name(Isa::kAvx512), "avx512");
}

}  // namespace
}  // namespace koi::kernels
