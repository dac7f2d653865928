#include "engine/block_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;

BlockHash fake_hash(uint64_t n) { return BlockHash{n, ~n}; }

TEST(BlockPoolTest, StartsWithEveryBlockFreeInIdOrder) {
  BlockPool pool(11);
  EXPECT_EQ(pool.num_blocks(), 11);
  EXPECT_EQ(pool.num_free_blocks(), 11);
  EXPECT_EQ(pool.free_list(), (Ids{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  EXPECT_DOUBLE_EQ(pool.usage(), 0.0);
}

TEST(BlockPoolTest, AllocateTakesFromHeadAndReleaseAppendsToTail) {
  BlockPool pool(11);
  auto a = pool.allocate(3);
  ASSERT_TRUE(a.has_value());
  EXPECT_EQ(*a, (Ids{0, 1, 2}));
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.num_free_blocks(), 8);
  EXPECT_EQ(pool.free_list(), (Ids{3, 4, 5, 6, 7, 8, 9, 10}));

  pool.release({2, 0});
  EXPECT_EQ(pool.ref_count(0), 0);
  EXPECT_EQ(pool.ref_count(1), 1);
  EXPECT_EQ(pool.free_list(), (Ids{3, 4, 5, 6, 7, 8, 9, 10, 2, 0}));
  EXPECT_NEAR(pool.usage(), 1.0 / 11.0, 1e-12);
}

TEST(BlockPoolTest, AllocationIsAllOrNothing) {
  BlockPool pool(11);
  ASSERT_TRUE(pool.allocate(9).has_value());
  EXPECT_FALSE(pool.allocate(3).has_value());
  EXPECT_EQ(pool.num_free_blocks(), 2);
  EXPECT_EQ(pool.free_list(), (Ids{9, 10}));
  auto rest = pool.allocate(2);
  ASSERT_TRUE(rest.has_value());
  EXPECT_EQ(*rest, (Ids{9, 10}));
  EXPECT_EQ(pool.num_free_blocks(), 0);
  EXPECT_FALSE(pool.allocate(1).has_value());
  EXPECT_DOUBLE_EQ(pool.usage(), 1.0);
}

TEST(BlockPoolTest, CachedFreeBlockCanBeTouchedBackUntilEvicted) {
  BlockPool pool(4);
  auto a = *pool.allocate(2);  // {0, 1}
  EXPECT_TRUE(pool.cache(0, fake_hash(100)));
  EXPECT_TRUE(pool.cache(1, fake_hash(101)));
  pool.release({1, 0});
  EXPECT_EQ(pool.free_list(), (Ids{2, 3, 1, 0}));
  EXPECT_EQ(pool.lookup(fake_hash(100)), 0);
  EXPECT_EQ(pool.lookup(fake_hash(101)), 1);

  // A hit on block 0 takes it off the free list without disturbing the others.
  pool.touch({0});
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.free_list(), (Ids{2, 3, 1}));

  // Allocating three blocks evicts 2, 3 (never cached) and then 1, dropping its hash.
  auto b = *pool.allocate(3);
  EXPECT_EQ(b, (Ids{2, 3, 1}));
  EXPECT_FALSE(pool.lookup(fake_hash(101)).has_value());
  EXPECT_FALSE(pool.hash(1).has_value());
  EXPECT_EQ(pool.lookup(fake_hash(100)), 0);
  EXPECT_EQ(pool.num_free_blocks(), 0);
}

TEST(BlockPoolTest, TouchAddsReferencesToBlocksInUse) {
  BlockPool pool(3);
  auto a = *pool.allocate(1);
  pool.touch(a);
  pool.touch(a);
  EXPECT_EQ(pool.ref_count(0), 3);
  pool.release(a);
  pool.release(a);
  EXPECT_EQ(pool.ref_count(0), 1);
  EXPECT_EQ(pool.free_list(), (Ids{1, 2}));
  pool.release(a);
  EXPECT_EQ(pool.free_list(), (Ids{1, 2, 0}));
}

TEST(BlockPoolTest, SecondBlockWithSameHashIsNotCached) {
  BlockPool pool(3);
  auto a = *pool.allocate(2);
  EXPECT_TRUE(pool.cache(0, fake_hash(7)));
  EXPECT_FALSE(pool.cache(1, fake_hash(7)));
  EXPECT_FALSE(pool.hash(1).has_value());
  EXPECT_EQ(pool.lookup(fake_hash(7)), 0);
}

TEST(BlockHashTest, ChainDependsOnParentTokensAndExtraKey) {
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const BlockHash root = hash_block(BlockHash{}, tokens, 0);
  EXPECT_EQ(root, hash_block(BlockHash{}, tokens, 0));
  EXPECT_NE(root, hash_block(BlockHash{}, tokens, 1));
  EXPECT_NE(root, hash_block(BlockHash{}, std::vector<int32_t>{1, 2, 3, 5}, 0));
  EXPECT_NE(hash_block(root, tokens, 0), hash_block(BlockHash{}, tokens, 0));
}

TEST(BlockPoolTest, EventLogRecordsStoresAndEvictionsInOrder) {
  BlockPool pool(2);
  std::vector<KvEvent> log;
  pool.set_event_log(&log);
  auto a = pool.allocate(2);
  ASSERT_TRUE(a);
  EXPECT_TRUE(pool.cache((*a)[0], fake_hash(1)));
  EXPECT_TRUE(pool.cache((*a)[1], fake_hash(2)));
  pool.release(*a);
  ASSERT_TRUE(pool.allocate(1));  // evicts block 0's hash 1, the least recently freed
  ASSERT_EQ(log.size(), 3u);
  EXPECT_EQ(log[0].kind, KvEvent::Kind::kStored);
  EXPECT_EQ(log[0].hash, fake_hash(1));
  EXPECT_EQ(log[1].hash, fake_hash(2));
  EXPECT_EQ(log[2].kind, KvEvent::Kind::kRemoved);
  EXPECT_EQ(log[2].hash, fake_hash(1));
}

}  // namespace
}  // namespace koi::engine
