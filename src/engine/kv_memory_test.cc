#include "engine/kv_memory.h"

#include <gtest/gtest.h>

namespace koi::engine {
namespace {

constexpr int64_t kRam = 64LL << 30;

TEST(KvMemoryTest, ParsesBytesUnitsAndFractions) {
  EXPECT_EQ(*parse_kv_cache_memory("6GiB", kRam), 6LL << 30);
  EXPECT_EQ(*parse_kv_cache_memory("512MiB", kRam), 512LL << 20);
  EXPECT_EQ(*parse_kv_cache_memory("2GB", kRam), 2'000'000'000LL);
  EXPECT_EQ(*parse_kv_cache_memory("1.5KiB", kRam), 1536);
  EXPECT_EQ(*parse_kv_cache_memory("1048576", kRam), 1048576);
  EXPECT_EQ(*parse_kv_cache_memory("0.25", kRam), 16LL << 30);
  EXPECT_EQ(*parse_kv_cache_memory("1", kRam), kRam);
}

TEST(KvMemoryTest, RejectsWhatIsNotASize) {
  for (const char* flag : {"", "abc", "-1GiB", "0", "4 GiB", "4gib", "3furlongs"}) {
    auto r = parse_kv_cache_memory(flag, kRam);
    ASSERT_FALSE(r.ok()) << flag;
    EXPECT_EQ(r.status().message(),
              std::string("--kv-cache-memory '") + flag +
                  "' is not a size; give bytes with a unit (6GiB, 512MiB, 2GB) or a fraction of RAM in (0, 1] (0.3)");
  }
}

TEST(KvMemoryTest, ParsesKvDtype) {
  EXPECT_EQ(*parse_kv_dtype("f32"), DType::kF32);
  EXPECT_EQ(*parse_kv_dtype("f16"), DType::kF16);
  EXPECT_EQ(*parse_kv_dtype("Q8_0"), DType::kQ8_0);
  for (const char* flag : {"", "q4_0", "bf16", "fp8"}) {
    EXPECT_EQ(parse_kv_dtype(flag).status().message(),
              std::string("--kv-dtype must be f32, f16 or q8_0 (32 values per block with an f16 scale), got '") + flag +
                  "'");
  }
}

TEST(KvMemoryTest, BlocksForMemory) {
  EXPECT_EQ(*kv_blocks_for_memory(10'000, 1'000), 10);
  EXPECT_EQ(*kv_blocks_for_memory(10'999, 1'000), 10);
  EXPECT_EQ(kv_blocks_for_memory(999, 1'000).status().message(),
            "--kv-cache-memory gives 999 bytes, less than one KV block (1000 bytes); give the KV cache more memory");
  EXPECT_GT(total_ram_bytes(), 0);
}

// TinyLlama's shape: 22 layers, 4 KV heads of 64, f32: 45,056 bytes per token, 2048 tokens.
constexpr int64_t kTinyLlamaSeq = 2048LL * 22 * 2 * 256 * 4;
constexpr int64_t kGiB = 1LL << 30;

TEST(KvMemoryTest, DefaultIsEverySequenceWhenItFits) {
  // 4 sequences (352 MiB: 88 MiB each) against 40% of (21 - 0.6) GiB.
  const KvDefault kv = default_kv_cache_memory(21 * kGiB, 600LL << 20, kTinyLlamaSeq, 4, 2048);
  EXPECT_EQ(kv.bytes, 4 * kTinyLlamaSeq);
  EXPECT_EQ(kv.reason, "room for all 4 sequences of 2048 tokens, within 40% of the 20.4 GiB available after the "
                       "model's 0.6 GiB");
}

TEST(KvMemoryTest, DefaultIsAShareOfWhatTheModelLeaves) {
  // 256 sequences would take 22 GiB; 40% of (20 GiB - 1 GiB) = 7.6 GiB is 88 sequences (88 MiB each).
  const KvDefault kv = default_kv_cache_memory(20 * kGiB, kGiB, kTinyLlamaSeq, 256, 2048);
  EXPECT_EQ(kv.bytes, static_cast<int64_t>(0.4 * static_cast<double>(19 * kGiB)));
  EXPECT_EQ(kv.bytes / kTinyLlamaSeq, 88);
  EXPECT_EQ(kv.reason, "40% of the 19.0 GiB available after the model's 1.0 GiB: room for 88 of the 256 "
                       "sequences of 2048 tokens");
}

TEST(KvMemoryTest, DefaultNeverGoesBelowOneFullSequence) {
  // A model larger than what is available: no budget at all, one sequence still.
  KvDefault kv = default_kv_cache_memory(2 * kGiB, 3 * kGiB, kTinyLlamaSeq, 256, 2048);
  EXPECT_EQ(kv.bytes, kTinyLlamaSeq);
  EXPECT_EQ(kv.reason, "one sequence of 2048 tokens, more than 40% of the 0.0 GiB available after the model's 3.0 GiB");
  // ... and never more than asked for: max_num_seqs 1.
  kv = default_kv_cache_memory(2 * kGiB, 3 * kGiB, kTinyLlamaSeq, 1, 2048);
  EXPECT_EQ(kv.bytes, kTinyLlamaSeq);
}

TEST(KvMemoryTest, ParsesMemAvailable) {
  EXPECT_EQ(parse_mem_available("MemTotal:       24576000 kB\nMemFree:        20000000 kB\n"
                                "MemAvailable:   22020096 kB\nBuffers: 1 kB\n"),
            22020096LL * 1024);
  EXPECT_EQ(parse_mem_available("MemAvailable: 5 kB"), 5 * 1024);
  EXPECT_EQ(parse_mem_available("MemTotal: 100 kB\n"), -1);
  EXPECT_EQ(parse_mem_available("XMemAvailable: 5 kB"), -1);
  EXPECT_EQ(parse_mem_available("MemAvailable: lots"), -1);
  EXPECT_EQ(parse_mem_available("MemAvailable: 5"), -1);
  EXPECT_GT(available_ram_bytes(), 0);
  EXPECT_LE(available_ram_bytes(), total_ram_bytes());
}

}  // namespace
}  // namespace koi::engine
