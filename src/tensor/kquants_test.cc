// K-quant blocks: sizes and ids as GGUF has them, decoding of hand-built blocks against a plain
// reading of the format (value i of a block, kquants.h), quantization round trips.
#include "tensor/kquants.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "base/random.h"
#include "tensor/dtype.h"

namespace koi {
namespace {

TEST(KQuants, TypeIdsAndBlockSizesMatchGguf) {
  struct Case { uint32_t ggml_id; DType type; const char* name; int64_t bytes; };
  for (Case c : {Case{10, DType::kQ2_K, "q2_K", 84}, Case{11, DType::kQ3_K, "q3_K", 110},
                 Case{12, DType::kQ4_K, "q4_K", 144}, Case{13, DType::kQ5_K, "q5_K", 176},
                 Case{14, DType::kQ6_K, "q6_K", 210}, Case{15, DType::kQ8_K, "q8_K", 292}}) {
    ASSERT_EQ(dtype_from_ggml(c.ggml_id), c.type) << c.name;
    EXPECT_EQ(static_cast<uint32_t>(c.type), c.ggml_id);
    EXPECT_EQ(dtype_name(c.type), c.name);
    EXPECT_EQ(dtype_from_name(c.name), c.type);
    EXPECT_EQ(dtype_block_size(c.type), 256);
    EXPECT_EQ(dtype_block_bytes(c.type), c.bytes);
    EXPECT_EQ(dtype_row_bytes(c.type, 2048), 8 * c.bytes);
    EXPECT_TRUE(dtype_is_kquant(c.type));
  }
  EXPECT_EQ(dtype_from_name("Q4_k"), DType::kQ4_K);
  EXPECT_FALSE(dtype_is_kquant(DType::kQ4_0));
}

TEST(KQuants, ScaleMinUnpacksByHand) {
  // Bytes 0..3: scale bits 0..5 of sub-blocks 0..3, bits 6..7 = bits 4..5 of the scale of 4..7;
  // bytes 4..7 likewise for the mins; bytes 8..11: low nibble scale, high nibble min of 4..7.
  const uint8_t s[12] = {0xC1, 0x02, 0x03, 0x04, 0x45, 0x06, 0x07, 0x08, 0x9A, 0xBC, 0xDE, 0xF0};
  int sc, m;
  kquant_scale_min(s, 0, &sc, &m);
  EXPECT_EQ(sc, 1);
  EXPECT_EQ(m, 5);
  kquant_scale_min(s, 4, &sc, &m);
  EXPECT_EQ(sc, 0x3A);  // 0xA | 0b11 << 4
  EXPECT_EQ(m, 0x19);   // 0x9 | 0b01 << 4
  kquant_scale_min(s, 5, &sc, &m);
  EXPECT_EQ(sc, 0x0C);
  EXPECT_EQ(m, 0x0B);
  kquant_scale_min(s, 7, &sc, &m);
  EXPECT_EQ(sc, 0x00);
  EXPECT_EQ(m, 0x0F);
}

TEST(KQuants, ScaleMinPackRoundTrips) {
  Rng rng(5);
  for (int trial = 0; trial < 100; ++trial) {
    uint8_t sc[8], m[8], packed[12];
    for (int j = 0; j < 8; ++j) {
      sc[j] = static_cast<uint8_t>(rng.below(64));
      m[j] = static_cast<uint8_t>(rng.below(64));
    }
    kquant_pack_scale_min(sc, m, packed);
    for (int j = 0; j < 8; ++j) {
      int s2, m2;
      kquant_scale_min(packed, j, &s2, &m2);
      ASSERT_EQ(s2, sc[j]);
      ASSERT_EQ(m2, m[j]);
    }
  }
}

// Super-block scales that are powers of two keep every decoded value exact in float, so the
// expected values below are exact whatever order the decoder multiplies in.
constexpr float kD = 0.125f, kDmin = 0.0625f;

void set_bits(uint8_t* bytes, int byte, int bit, int width, int value) {
  bytes[byte] = static_cast<uint8_t>(bytes[byte] | ((value & ((1 << width) - 1)) << bit));
}

std::vector<float> decode(DType t, const void* block) {
  std::vector<float> y(kQK_K);
  dequantize_row(t, block, y.data(), kQK_K);
  return y;
}

TEST(KQuants, Q4KDecodesHandBuiltBlock) {
  Rng rng(1);
  BlockQ4_K b{};
  b.d = f32_to_f16(kD);
  b.dmin = f32_to_f16(kDmin);
  int sc[8], m[8], q[kQK_K];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<int>(rng.below(64));
    m[j] = static_cast<int>(rng.below(64));
    // The 12-byte layout, bit by bit.
    if (j < 4) {
      set_bits(b.scales, j, 0, 6, sc[j]);
      set_bits(b.scales, j + 4, 0, 6, m[j]);
    } else {
      set_bits(b.scales, j + 4, 0, 4, sc[j]);
      set_bits(b.scales, j + 4, 4, 4, m[j]);
      set_bits(b.scales, j - 4, 6, 2, sc[j] >> 4);
      set_bits(b.scales, j, 6, 2, m[j] >> 4);
    }
  }
  for (int i = 0; i < kQK_K; ++i) {
    q[i] = static_cast<int>(rng.below(16));
    set_bits(b.qs, 32 * (i / 64) + i % 32, i % 64 < 32 ? 0 : 4, 4, q[i]);
  }
  const std::vector<float> y = decode(DType::kQ4_K, &b);
  for (int i = 0; i < kQK_K; ++i) {
    ASSERT_EQ(y[i], kD * sc[i / 32] * q[i] - kDmin * m[i / 32]) << i;
  }
}

TEST(KQuants, Q5KDecodesHandBuiltBlock) {
  Rng rng(2);
  BlockQ5_K b{};
  b.d = f32_to_f16(kD);
  b.dmin = f32_to_f16(kDmin);
  uint8_t sc[8], m[8];
  for (int j = 0; j < 8; ++j) {
    sc[j] = static_cast<uint8_t>(rng.below(64));
    m[j] = static_cast<uint8_t>(rng.below(64));
  }
  kquant_pack_scale_min(sc, m, b.scales);  // checked bit by bit above
  int q[kQK_K];
  for (int i = 0; i < kQK_K; ++i) {
    q[i] = static_cast<int>(rng.below(32));
    set_bits(b.qs, 32 * (i / 64) + i % 32, i % 64 < 32 ? 0 : 4, 4, q[i]);
    set_bits(b.qh, i % 32, i / 32, 1, q[i] >> 4);
  }
  const std::vector<float> y = decode(DType::kQ5_K, &b);
  for (int i = 0; i < kQK_K; ++i) ASSERT_EQ(y[i], kD * sc[i / 32] * q[i] - kDmin * m[i / 32]) << i;
}

TEST(KQuants, Q6KDecodesHandBuiltBlock) {
  Rng rng(3);
  BlockQ6_K b{};
  b.d = f32_to_f16(kD);
  for (int j = 0; j < 16; ++j) b.scales[j] = static_cast<int8_t>(static_cast<int>(rng.below(256)) - 128);
  int q[kQK_K];
  for (int i = 0; i < kQK_K; ++i) {
    q[i] = static_cast<int>(rng.below(64));
    const int h = i / 128, k = i % 128 / 32, l = i % 32;
    set_bits(b.ql, 64 * h + 32 * (k % 2) + l, k < 2 ? 0 : 4, 4, q[i]);
    set_bits(b.qh, 32 * h + l, 2 * k, 2, q[i] >> 4);
  }
  const std::vector<float> y = decode(DType::kQ6_K, &b);
  for (int i = 0; i < kQK_K; ++i) ASSERT_EQ(y[i], kD * b.scales[i / 16] * (q[i] - 32)) << i;
}

TEST(KQuants, Q3KDecodesHandBuiltBlock) {
  Rng rng(4);
  BlockQ3_K b{};
  b.d = f32_to_f16(kD);
  int sc[16], q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int>(rng.below(64));
    set_bits(b.scales, j % 8, j < 8 ? 0 : 4, 4, sc[j]);
    set_bits(b.scales, 8 + j % 4, 2 * (j / 4), 2, sc[j] >> 4);
  }
  for (int i = 0; i < kQK_K; ++i) {
    q[i] = static_cast<int>(rng.below(8));
    const int h = i / 128, k = i % 128 / 32, l = i % 32;
    set_bits(b.qs, 32 * h + l, 2 * k, 2, q[i]);
    set_bits(b.hmask, l, 4 * h + k, 1, q[i] >> 2);
  }
  const std::vector<float> y = decode(DType::kQ3_K, &b);
  for (int i = 0; i < kQK_K; ++i) ASSERT_EQ(y[i], kD * (sc[i / 16] - 32) * (q[i] - 4)) << i;
}

TEST(KQuants, Q2KDecodesHandBuiltBlock) {
  Rng rng(6);
  BlockQ2_K b{};
  b.d = f32_to_f16(kD);
  b.dmin = f32_to_f16(kDmin);
  int sc[16], m[16], q[kQK_K];
  for (int j = 0; j < 16; ++j) {
    sc[j] = static_cast<int>(rng.below(16));
    m[j] = static_cast<int>(rng.below(16));
    b.scales[j] = static_cast<uint8_t>(sc[j] | (m[j] << 4));
  }
  for (int i = 0; i < kQK_K; ++i) {
    q[i] = static_cast<int>(rng.below(4));
    set_bits(b.qs, 32 * (i / 128) + i % 32, 2 * (i % 128 / 32), 2, q[i]);
  }
  const std::vector<float> y = decode(DType::kQ2_K, &b);
  for (int i = 0; i < kQK_K; ++i) ASSERT_EQ(y[i], kD * sc[i / 16] * q[i] - kDmin * m[i / 16]) << i;
}

TEST(KQuants, Q8KQuantizesAsGgml) {
  std::vector<float> x(kQK_K);
  for (int i = 0; i < kQK_K; ++i) x[i] = static_cast<float>(i % 17) - 3.0f;  // largest magnitude: +13
  x[100] = -2.5f;
  BlockQ8_K b;
  quantize_row_q8_K(x.data(), &b, kQK_K);
  EXPECT_EQ(b.d, 1.0f / (-127.0f / 13.0f));  // the largest value maps to -127
  EXPECT_EQ(b.qs[16], -127);
  for (int g = 0; g < 16; ++g) {
    int sum = 0;
    for (int i = 0; i < 16; ++i) sum += b.qs[16 * g + i];
    EXPECT_EQ(b.bsums[g], sum);
  }
  // -2.5 * -127 / 13 = 24.42 -> 24; a zero block stays zero.
  EXPECT_EQ(b.qs[100], 24);
  std::vector<float> zeros(kQK_K, 0.0f);
  quantize_row_q8_K(zeros.data(), &b, kQK_K);
  EXPECT_EQ(b.d, 0.0f);
  EXPECT_EQ(b.bsums[3], 0);
}

// Round trips on normal values: the rms error relative to the rms of x stays below what each
// format's bits allow (measured: q4_K 0.0705, q5_K 0.0359, q6_K 0.0174, q8_K 0.0069 at seed 9;
// bounds 20% above).
TEST(KQuants, QuantizeRoundTripErrors) {
  Rng rng(9);
  const int64_t n = kQK_K * 16;
  std::vector<float> x(n), y(n);
  double x2 = 0;
  for (float& v : x) {
    v = static_cast<float>(rng.normal());
    x2 += v * v;
  }
  struct Case { DType type; double bound; };
  for (Case c : {Case{DType::kQ4_K, 0.085}, Case{DType::kQ5_K, 0.043}, Case{DType::kQ6_K, 0.021},
                 Case{DType::kQ8_K, 0.0083}}) {
    std::vector<uint8_t> bytes(static_cast<size_t>(dtype_row_bytes(c.type, n)));
    quantize_row(c.type, x.data(), bytes.data(), n);
    dequantize_row(c.type, bytes.data(), y.data(), n);
    double e2 = 0;
    for (int64_t i = 0; i < n; ++i) e2 += (x[i] - y[i]) * (x[i] - y[i]);
    const double rel = std::sqrt(e2 / x2);
    EXPECT_LT(rel, c.bound) << dtype_name(c.type);
  }
}

TEST(KQuants, QuantizeKeepsConstantAndZeroBlocks) {
  for (DType t : {DType::kQ4_K, DType::kQ5_K, DType::kQ6_K}) {
    for (float value : {0.0f, -1.5f}) {
      std::vector<float> x(kQK_K, value), y(kQK_K);
      std::vector<uint8_t> bytes(static_cast<size_t>(dtype_block_bytes(t)));
      quantize_row(t, x.data(), bytes.data(), kQK_K);
      dequantize_row(t, bytes.data(), y.data(), kQK_K);
      for (int i = 0; i < kQK_K; ++i) ASSERT_NEAR(y[i], value, 2e-3) << dtype_name(t) << " " << value;
    }
  }
}

}  // namespace
}  // namespace koi
