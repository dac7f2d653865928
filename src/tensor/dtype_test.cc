#include "tensor/dtype.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "base/random.h"

namespace koi {
namespace {

TEST(DTypeTest, F16RoundTripsEveryHalf) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    float f = f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) continue;
    ASSERT_EQ(f32_to_f16(f), h) << std::hex << h;
  }
}

TEST(DTypeTest, F16RoundsToNearestEven) {
  EXPECT_EQ(f32_to_f16(1.0f), 0x3C00);
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(1e6f), 0x7C00);
  // 1 + 2^-11 is exactly halfway between 1 and the next half: ties to even (1.0).
  EXPECT_EQ(f32_to_f16(1.0f + 0x1.0p-11f), 0x3C00);
  EXPECT_EQ(f32_to_f16(1.0f + 0x1.8p-10f), 0x3C02);
  EXPECT_FLOAT_EQ(f16_to_f32(0x0001), 0x1.0p-24f);
}

TEST(DTypeTest, Bf16RoundTrip) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  EXPECT_FLOAT_EQ(bf16_to_f32(f32_to_bf16(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
}

// Quantization error bounds: q8_0 within amax/254 per value, q4_0 within amax/8 (one step)
// plus rounding; f16/bf16 within their relative precision.
TEST(DTypeTest, QuantizeDequantizeWithinBounds) {
  Rng rng(7);
  const int64_t n = 32 * 9;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = static_cast<float>(rng.normal());
  std::vector<uint8_t> buf(static_cast<size_t>(dtype_row_bytes(DType::kF32, n)));
  struct Case { DType t; double tol_of_block_amax; };
  for (Case c : {Case{DType::kQ8_0, 1.0 / 127}, Case{DType::kQ4_0, 1.0 / 8 + 1e-3},
                 Case{DType::kF16, 1e-3}, Case{DType::kBF16, 8e-3}}) {
    quantize_row(c.t, x.data(), buf.data(), n);
    dequantize_row(c.t, buf.data(), y.data(), n);
    for (int64_t b = 0; b < n / 32; ++b) {
      float amax = 0;
      for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
      for (int j = 0; j < 32; ++j) {
        ASSERT_NEAR(y[b * 32 + j], x[b * 32 + j], amax * c.tol_of_block_amax) << dtype_name(c.t);
      }
    }
  }
}

}  // namespace
}  // namespace koi
