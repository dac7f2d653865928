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

TEST(KvMemoryTest, BlocksForMemory) {
  EXPECT_EQ(*kv_blocks_for_memory(10'000, 1'000), 10);
  EXPECT_EQ(*kv_blocks_for_memory(10'999, 1'000), 10);
  EXPECT_EQ(kv_blocks_for_memory(999, 1'000).status().message(),
            "--kv-cache-memory gives 999 bytes, less than one KV block (1000 bytes); give the KV cache more memory");
  EXPECT_GT(total_ram_bytes(), 0);
}

}  // namespace
}  // namespace koi::engine
