// KvCache in each dtype: what a block costs, what write() stores and what the heads read back
// (against tensor's quantize_row / dequantize_row), and the errors for types and heads that do
// not fit.
#include "model/kv_cache.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace koi::model {
namespace {

KvCacheShape shape_of(DType dtype) {
  KvCacheShape s;
  s.n_layers = 3;
  s.n_kv_heads = 2;
  s.head_dim = 64;
  s.block_size = 16;
  s.num_blocks = 5;
  s.dtype = dtype;
  return s;
}

TEST(KvCacheTest, BytesPerBlockFollowTheDtype) {
  // K and V x 3 layers x 16 slots x 128 values.
  EXPECT_EQ(shape_of(DType::kF32).bytes_per_block(), 2 * 3 * 16 * 128 * 4);
  EXPECT_EQ(shape_of(DType::kF16).bytes_per_block(), 2 * 3 * 16 * 128 * 2);
  EXPECT_EQ(shape_of(DType::kQ8_0).bytes_per_block(), 2 * 3 * 16 * (128 / 32) * 34);  // 34 bytes per 32 values
  EXPECT_EQ(shape_of(DType::kQ8_0).head_bytes(), 2 * 34);
}

TEST(KvCacheTest, WriteStoresTheDtypeAndHeadsReadItBack) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    const KvCacheShape s = shape_of(dtype);
    KvCache kv(s);
    std::vector<float> k(128), v(128);
    for (int i = 0; i < 128; ++i) {
      k[i] = std::sin(0.37f * static_cast<float>(i)) * 3.0f;
      v[i] = std::cos(0.11f * static_cast<float>(i)) - 0.5f;
    }
    kv.write(2, 77, k.data(), v.data());
    // The stored bytes are the dtype's encoding of the whole slot.
    std::vector<std::byte> want(static_cast<size_t>(s.slot_bytes()));
    quantize_row(dtype, k.data(), want.data(), 128);
    EXPECT_EQ(std::memcmp(kv.k(2, 77), want.data(), want.size()), 0);
    quantize_row(dtype, v.data(), want.data(), 128);
    EXPECT_EQ(std::memcmp(kv.v(2, 77), want.data(), want.size()), 0);
    // Each head reads back as dequantize_row of its bytes, within the format's rounding.
    std::vector<float> scratch(64), whole(128);
    dequantize_row(dtype, want.data(), whole.data(), 128);  // V
    const float tolerance = dtype == DType::kF32 ? 0.0f : dtype == DType::kF16 ? 2e-3f : 3.0f / 127;
    for (int head = 0; head < 2; ++head) {
      const float* kh = kv.k_head(2, 77, head, scratch.data());
      for (int d = 0; d < 64; ++d) EXPECT_NEAR(kh[d], k[head * 64 + d], tolerance);
      const float* vh = kv.v_head(2, 77, head, scratch.data());
      for (int d = 0; d < 64; ++d) EXPECT_EQ(vh[d], whole[head * 64 + d]);
    }
    // Other slots and layers stay zero.
    EXPECT_EQ(kv.k_head(1, 77, 0, scratch.data())[0], 0.0f);
    EXPECT_EQ(kv.v_head(2, 76, 1, scratch.data())[63], 0.0f);
  }
}

// A split cache (Gemma 2's alternation: layers 0 and 2 of 3 windowed): a block holds the larger
// kind's 2 layers, each kind numbered apart, and a sequence's blocks are its full table plus
// at most the window's.
TEST(KvCacheTest, SplitCacheKeepsWindowedLayersInBlocksOfTheirOwn) {
  KvCacheShape s = shape_of(DType::kF32);
  s.windowed = {true, false, true};
  s.window = 40;
  EXPECT_EQ(s.page_layers(), 2);
  EXPECT_TRUE(s.has_full_layers());
  EXPECT_EQ(s.bytes_per_block(), 2 * 2 * 16 * 128 * 4);
  // 100 tokens: 7 full-table blocks; the window table reads 40 + 16 positions: 4 + 1 blocks.
  EXPECT_EQ(s.blocks_for_sequence(100, 16), 7 + 5);
  EXPECT_EQ(s.blocks_for_sequence(20, 16), 2 + 2);
  EXPECT_EQ(s.capacity_tokens(16), 2 * 16);  // 5 blocks hold 2 full-table and 2 window blocks
  s.num_blocks = 20;
  EXPECT_EQ(s.capacity_tokens(16), (20 - 5) * 16);  // 15 + 5 blocks
  KvCache kv(s);
  std::vector<float> k(128, 1.0f), v(128, 2.0f);
  kv.write(0, 3, k.data(), v.data());  // windowed layer 0 and full layer 1 share page slot 0
  EXPECT_EQ(kv.k(0, 3), kv.k(1, 3));
  EXPECT_EQ(kv.k(2, 3), kv.k(0, 3) + s.num_blocks * 16 * s.slot_bytes());  // layer 2: the second page layer
  s.windowed = {true, true, true};
  EXPECT_FALSE(s.has_full_layers());
  EXPECT_EQ(s.page_layers(), 3);
}

TEST(KvCacheTest, RefusesTypesAndHeadsThatDoNotFit) {
  EXPECT_TRUE(check_kv_dtype(DType::kF16, 8).ok());
  EXPECT_TRUE(check_kv_dtype(DType::kQ8_0, 96).ok());
  EXPECT_EQ(check_kv_dtype(DType::kQ8_0, 8).message(),
            "--kv-dtype q8_0 stores each head in blocks of 32 values, but this model's heads have 8; use --kv-dtype "
            "f16 or f32");
  EXPECT_EQ(check_kv_dtype(DType::kQ4_0, 64).message(),
            "--kv-dtype q4_0 is not a KV cache type; use f32, f16 or q8_0");
}

}  // namespace
}  // namespace koi::model
