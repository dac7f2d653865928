#include "engine/kv_cache_manager.h"
#include "engine/block_hash.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <vector>

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 16;

Ids iota_tokens(int n, int32_t first) {
  Ids ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

Ids concat(Ids a, const Ids& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

Request make_request(std::string id, Ids tokens) {
  return Request(std::move(id), std::move(tokens), SamplingParams{}, 0, 0, 0, 0);
}

// Admits a request as the scheduler does: take the hits, allocate the rest, compute it.
bool admit(KvCacheManager& kv, Request& r) {
  const auto computed = kv.get_computed_blocks(r);
  if (!kv.allocate_slots(r, r.num_tokens() - computed.num_tokens, computed)) return false;
  r.num_computed_tokens = r.num_tokens();
  kv.cache_full_blocks(r);
  return true;
}

// Appends one sampled token and computes the previous one, as a decode step does.
void decode(KvCacheManager& kv, Request& r, int32_t token) {
  r.token_ids.push_back(token);
  ASSERT_TRUE(kv.allocate_slots(r, 1));
  r.num_computed_tokens += 1;
  kv.cache_full_blocks(r);
}

Ids ref_counts(const KvCacheManager& kv) {
  Ids refs;
  for (int32_t b = 0; b < kv.pool().num_blocks(); ++b) refs.push_back(kv.pool().ref_count(b));
  return refs;
}

// 11 blocks of 16 tokens, every step checked: block tables, reference counts, free list.
TEST(KvCacheManagerTest, PrefixCachingElevenBlocksStepByStep) {
  KvCacheManager kv(11, kBlockSize, true);
  const Ids prefix = iota_tokens(48, 0);  // three full blocks

  // A: 55 tokens -> 4 blocks; its 3 full blocks enter the cache once computed.
  Request a = make_request("a", concat(prefix, iota_tokens(7, 48)));
  EXPECT_EQ(kv.get_computed_blocks(a).num_tokens, 0);
  ASSERT_TRUE(admit(kv, a));
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 3}));
  EXPECT_EQ(ref_counts(kv), (Ids{1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(kv.pool().free_list(), (Ids{4, 5, 6, 7, 8, 9, 10}));
  EXPECT_TRUE(kv.pool().hash(2).has_value());
  EXPECT_FALSE(kv.pool().hash(3).has_value());

  // B shares the 48-token prefix: it takes blocks 0-2 and computes only its 5 new tokens.
  Request b = make_request("b", concat(prefix, iota_tokens(5, 100)));
  const auto hits = kv.get_computed_blocks(b);
  EXPECT_EQ(hits.block_ids, (Ids{0, 1, 2}));
  EXPECT_EQ(hits.num_tokens, 48);
  ASSERT_TRUE(kv.allocate_slots(b, 5, hits));
  b.num_computed_tokens = 53;
  kv.cache_full_blocks(b);
  EXPECT_EQ(kv.block_table(b), (Ids{0, 1, 2, 4}));
  EXPECT_EQ(ref_counts(kv), (Ids{2, 2, 2, 1, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(kv.pool().free_list(), (Ids{5, 6, 7, 8, 9, 10}));
  EXPECT_EQ(kv.prefix_cache_stats().queried_tokens, 55 + 53);
  EXPECT_EQ(kv.prefix_cache_stats().hit_tokens, 48);

  // A decodes 10 tokens: block 3 fills (and is cached) at 64, block 5 is taken at 65.
  for (int32_t t = 55; t < 65; ++t) decode(kv, a, t);
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 3, 5}));
  EXPECT_TRUE(kv.pool().hash(3).has_value());
  EXPECT_EQ(kv.pool().free_list(), (Ids{6, 7, 8, 9, 10}));

  // Freeing releases tail first: A's private blocks 5 and 3 join the free list first.
  kv.free(a);
  EXPECT_TRUE(kv.block_table(a).empty());
  EXPECT_EQ(ref_counts(kv), (Ids{1, 1, 1, 0, 1, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(kv.pool().free_list(), (Ids{6, 7, 8, 9, 10, 5, 3}));
  kv.free(b);
  EXPECT_EQ(ref_counts(kv), (Ids{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(kv.pool().free_list(), (Ids{6, 7, 8, 9, 10, 5, 3, 4, 2, 1, 0}));

  // C is exactly A's first 64 tokens: 4 cached blocks, but the last token must be
  // computed, so it reuses 3 and recomputes the 4th into a fresh block.
  Request c = make_request("c", iota_tokens(64, 0));
  EXPECT_EQ(kv.get_computed_blocks(c).block_ids, (Ids{0, 1, 2}));
  ASSERT_TRUE(admit(kv, c));
  EXPECT_EQ(kv.block_table(c), (Ids{0, 1, 2, 6}));
  EXPECT_FALSE(kv.pool().hash(6).has_value());  // same content as block 3, cached once
  EXPECT_EQ(kv.pool().free_list(), (Ids{7, 8, 9, 10, 5, 3, 4}));

  // D needs 7 fresh blocks: it takes the whole free list in LRU order, evicting block 3.
  Request d = make_request("d", iota_tokens(112, 1000));
  ASSERT_TRUE(admit(kv, d));
  EXPECT_EQ(kv.block_table(d), (Ids{7, 8, 9, 10, 5, 3, 4}));
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);
  EXPECT_EQ(ref_counts(kv), (Ids{1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}));

  // E does not fit: nothing changes.
  Request e = make_request("e", iota_tokens(16, 5000));
  EXPECT_FALSE(admit(kv, e));
  EXPECT_TRUE(kv.block_table(e).empty());
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);

  // Block 3 was evicted, so A's 4th block is no longer a hit.
  Request f = make_request("f", iota_tokens(65, 0));
  EXPECT_EQ(kv.get_computed_blocks(f).block_ids, (Ids{0, 1, 2}));

  kv.free(d);
  EXPECT_EQ(kv.pool().free_list(), (Ids{4, 3, 5, 10, 9, 8, 7}));
  kv.free(c);
  EXPECT_EQ(kv.pool().free_list(), (Ids{4, 3, 5, 10, 9, 8, 7, 6, 2, 1, 0}));
  EXPECT_EQ(kv.prefix_cache_stats().queried_tokens, 55 + 53 + 64 + 112);
  EXPECT_EQ(kv.prefix_cache_stats().hit_tokens, 48 + 48);
}

TEST(KvCacheManagerTest, HitsOnFreeBlocksCountAgainstTheFreeList) {
  KvCacheManager kv(4, kBlockSize, true);
  Request a = make_request("a", iota_tokens(33, 0));
  ASSERT_TRUE(admit(kv, a));  // blocks 0, 1 (cached), 2
  kv.free(a);
  Request b = make_request("b", iota_tokens(16, 500));
  ASSERT_TRUE(admit(kv, b));  // block 3
  EXPECT_EQ(kv.pool().free_list(), (Ids{2, 1, 0}));

  // C hits blocks 0 and 1, both free, and needs 2 more: 2 + 2 > 3 free, so nothing moves.
  Request c = make_request("c", concat(iota_tokens(32, 0), iota_tokens(20, 900)));
  const auto hits = kv.get_computed_blocks(c);
  EXPECT_EQ(hits.block_ids, (Ids{0, 1}));
  EXPECT_FALSE(kv.allocate_slots(c, 20, hits));
  EXPECT_EQ(kv.pool().free_list(), (Ids{2, 1, 0}));
  EXPECT_EQ(ref_counts(kv), (Ids{0, 0, 0, 1}));
  EXPECT_EQ(kv.prefix_cache_stats().hit_tokens, 0);
}

TEST(KvCacheManagerTest, CacheKeySeparatesIdenticalTokens) {
  KvCacheManager kv(8, kBlockSize, true);
  Request a = make_request("a", iota_tokens(40, 0));
  ASSERT_TRUE(admit(kv, a));
  Request b = make_request("b", iota_tokens(40, 0));
  b.cache_key = 7;  // another adapter
  EXPECT_TRUE(kv.get_computed_blocks(b).block_ids.empty());
  Request c = make_request("c", iota_tokens(40, 0));
  EXPECT_EQ(kv.get_computed_blocks(c).block_ids, (Ids{0, 1}));
}

// The same tokens under two adapters, or one adapter for two tenants, never share blocks; the
// base model keeps the tenant's salt key, so base prefixes are cached as before.
TEST(KvCacheManagerTest, AdapterKeysSeparateAdaptersAndTenants) {
  const uint64_t tenant = cache_key_for_salt("tenant-a");
  EXPECT_EQ(cache_key_for_adapter(0, 0), 0u);
  EXPECT_EQ(cache_key_for_adapter(tenant, 0), tenant);
  KvCacheManager kv(16, kBlockSize, true);
  Request first = make_request("first", iota_tokens(40, 0));
  first.cache_key = cache_key_for_adapter(tenant, 1);
  ASSERT_TRUE(admit(kv, first));
  for (const auto& [salt, adapter] : {std::pair{tenant, uint64_t{2}}, std::pair{uint64_t{0}, uint64_t{1}},
                                      std::pair{tenant, uint64_t{0}}}) {
    Request other = make_request("other", iota_tokens(40, 0));
    other.cache_key = cache_key_for_adapter(salt, adapter);
    EXPECT_TRUE(kv.get_computed_blocks(other).block_ids.empty()) << "salt " << salt << " adapter " << adapter;
  }
  Request same = make_request("same", iota_tokens(40, 0));
  same.cache_key = cache_key_for_adapter(tenant, 1);
  EXPECT_EQ(kv.get_computed_blocks(same).block_ids.size(), 2u);
}

TEST(KvCacheManagerTest, DisabledPrefixCachingNeverHits) {
  KvCacheManager kv(8, kBlockSize, false);
  Request a = make_request("a", iota_tokens(40, 0));
  ASSERT_TRUE(admit(kv, a));
  kv.free(a);
  Request b = make_request("b", iota_tokens(40, 0));
  EXPECT_TRUE(kv.get_computed_blocks(b).block_ids.empty());
  EXPECT_FALSE(kv.pool().hash(0).has_value());
}

// Sliding-window layers (KvGroups::window): a window of 32 positions over blocks of 16, so a
// token at position p reads the window table's blocks (p - 31) / 16 .. p / 16 and a request
// holds at most 3 of them, whatever its length.
constexpr KvGroups kWindow32{true, 32};
constexpr int32_t kReleased = KvCacheManager::kReleased;

TEST(KvCacheManagerTest, WindowTableReleasesBlocksThatLeftTheWindow) {
  KvCacheManager kv(11, kBlockSize, true, kWindow32);
  Request a = make_request("a", iota_tokens(40, 0));
  ASSERT_TRUE(admit(kv, a));  // 3 blocks in each table, full table first
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2}));
  EXPECT_EQ(kv.window_block_table(a), (Ids{3, 4, 5}));
  // Decoding positions 40..46 reads block 0 still; position 47 reads 16..47, so block 0 leaves.
  for (int32_t t = 0; t < 7; ++t) decode(kv, a, 100 + t);
  EXPECT_EQ(kv.window_block_table(a), (Ids{3, 4, 5}));
  decode(kv, a, 107);
  EXPECT_EQ(kv.window_block_table(a), (Ids{kReleased, 4, 5}));
  EXPECT_EQ(kv.pool().free_list(), (Ids{6, 7, 8, 9, 10, 3}));   // released to the tail, hash kept
  EXPECT_TRUE(kv.pool().hash(3).has_value());
  decode(kv, a, 200);  // position 48: a fourth block in each table
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 6}));
  EXPECT_EQ(kv.window_block_table(a), (Ids{kReleased, 4, 5, 7}));
  // Up to position 100: the full table grows to 7 blocks, the window table never holds more than 3.
  for (int32_t t = 0; t < 52; ++t) {
    decode(kv, a, 300 + t);
    EXPECT_LE(static_cast<int>(std::count_if(kv.window_block_table(a).begin(), kv.window_block_table(a).end(),
                                             [](int32_t id) { return id != kReleased; })),
              3);
  }
  EXPECT_EQ(kv.block_table(a).size(), 7u);  // 101 tokens
  // Blocks 1, 2 and 3 left at positions 63, 79 and 95; each next block came from the free list's head.
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 6, 8, 10, 4}));
  EXPECT_EQ(kv.window_block_table(a), (Ids{kReleased, kReleased, kReleased, kReleased, 9, 3, 5}));
  EXPECT_EQ(kv.num_blocks_held(a), 7 + 3);
  kv.free(a);
  EXPECT_EQ(kv.pool().num_free_blocks(), 11);
}

TEST(KvCacheManagerTest, ImportedPromptReleasesUnreadWindowBlocksBeforeCaching) {
  // A decode worker reserves both tables for an 80-token prompt at once (KV import); the
  // window blocks its token at position 80 does not read (0-2) go before the prompt is cached,
  // so a block the peer never sent is never entered into the prefix cache.
  KvCacheManager kv(16, kBlockSize, true, kWindow32);
  Request a = make_request("a", iota_tokens(80, 0));
  ASSERT_TRUE(kv.allocate_slots(a, 80));
  EXPECT_EQ(kv.window_block_table(a), (Ids{5, 6, 7, 8, 9}));
  a.num_computed_tokens = 80;
  kv.release_out_of_window(a, 80);
  EXPECT_EQ(kv.window_block_table(a), (Ids{kReleased, kReleased, kReleased, 8, 9}));
  EXPECT_EQ(kv.num_blocks_held(a), 5 + 2);
  kv.cache_full_blocks(a);
  for (int32_t id : {5, 6, 7}) EXPECT_FALSE(kv.pool().hash(id).has_value()) << id;
  for (int32_t id : {8, 9, 0, 4}) EXPECT_TRUE(kv.pool().hash(id).has_value()) << id;
  kv.release_out_of_window(a, 80);  // nothing more leaves
  EXPECT_EQ(kv.num_blocks_held(a), 7);
}

TEST(KvCacheManagerTest, WindowPrefixHitNeedsOnlyTheBlocksItsNextTokenReads) {
  KvCacheManager kv(16, kBlockSize, true, kWindow32);
  const Ids prompt = iota_tokens(80, 0);  // 5 full blocks
  Request a = make_request("a", prompt);
  ASSERT_TRUE(admit(kv, a));
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(kv.window_block_table(a), (Ids{5, 6, 7, 8, 9}));
  decode(kv, a, 500);  // position 80 reads 49..80: window blocks 0-2 leave
  EXPECT_EQ(kv.block_table(a), (Ids{0, 1, 2, 3, 4, 10}));
  EXPECT_EQ(kv.window_block_table(a), (Ids{kReleased, kReleased, kReleased, 8, 9, 11}));

  // b shares the 80-token prompt: every full block hits, and of the window table only blocks 3
  // and 4, which its token at position 80 reads; the others stay unread (kReleased).
  Request b = make_request("b", concat(prompt, iota_tokens(5, 900)));
  const ComputedBlocks hit = kv.get_computed_blocks(b);
  EXPECT_EQ(hit.num_tokens, 80);
  EXPECT_EQ(hit.block_ids, (Ids{0, 1, 2, 3, 4}));
  EXPECT_EQ(hit.window_block_ids, (Ids{kReleased, kReleased, kReleased, 8, 9}));
  ASSERT_TRUE(kv.allocate_slots(b, 5, hit));
  EXPECT_EQ(kv.pool().ref_count(8), 2);
  EXPECT_EQ(kv.pool().ref_count(5), 0);  // released by a, still cached, not taken by b

  // c shares 50 tokens: 3 full blocks, whose next token (position 48) reads window blocks 1 and
  // 2. They were released by a but are still cached on the free list, so they hit.
  Request c = make_request("c", concat(Ids(prompt.begin(), prompt.begin() + 50), iota_tokens(10, 700)));
  const ComputedBlocks c_hit = kv.get_computed_blocks(c);
  EXPECT_EQ(c_hit.num_tokens, 48);
  EXPECT_EQ(c_hit.window_block_ids, (Ids{kReleased, 6, 7}));

  // e shares 32 tokens: position 32 reads 1..32, so its hit takes window blocks 0 and 1 (ids 5
  // and 6) off the free list.
  Request e = make_request("e", concat(Ids(prompt.begin(), prompt.begin() + 32), iota_tokens(8, 800)));
  const ComputedBlocks e_hit = kv.get_computed_blocks(e);
  EXPECT_EQ(e_hit.window_block_ids, (Ids{5, 6}));
  ASSERT_TRUE(kv.allocate_slots(e, 8, e_hit));
  EXPECT_EQ(kv.pool().free_list(), (Ids{7}));
  kv.free(b);  // its own blocks (window 13, full 12) join the free list, tail first per table
  EXPECT_EQ(kv.pool().free_list(), (Ids{7, 13, 12}));
  // A new request evicts window block 2 (id 7). c's 3-block hit would need window blocks 1 and 2;
  // the longest hit whose window is whole is 2 blocks (position 32 reads blocks 0 and 1).
  Request filler = make_request("filler", iota_tokens(16, 5000));
  ASSERT_TRUE(kv.allocate_slots(filler, 16));
  EXPECT_FALSE(kv.pool().hash(7).has_value());
  const ComputedBlocks shorter = kv.get_computed_blocks(c);
  EXPECT_EQ(shorter.num_tokens, 32);
  EXPECT_EQ(shorter.block_ids, (Ids{0, 1}));
  EXPECT_EQ(shorter.window_block_ids, (Ids{5, 6}));
}

TEST(KvCacheManagerTest, WindowReleaseCountsTowardsAnAllocationThatOtherwiseFails) {
  KvCacheManager kv(6, kBlockSize, true, kWindow32);
  Request a = make_request("a", iota_tokens(48, 0));
  ASSERT_TRUE(admit(kv, a));  // 3 + 3 blocks: the pool is full
  EXPECT_EQ(kv.pool().num_free_blocks(), 0);
  // Position 48 needs a fourth block in each table; window block 0 leaving frees only one.
  a.token_ids.push_back(1);
  EXPECT_FALSE(kv.allocate_slots(a, 1));
  EXPECT_EQ(kv.window_block_table(a), (Ids{3, 4, 5}));  // nothing changed
  kv.free(a);

  // With the window table only (every layer windowed), the block leaving pays for the new one.
  KvCacheManager windowed(3, kBlockSize, true, KvGroups{false, 32});
  Request w = make_request("w", iota_tokens(48, 0));
  ASSERT_TRUE(admit(windowed, w));
  EXPECT_TRUE(windowed.block_table(w).empty());
  w.token_ids.push_back(1);
  ASSERT_TRUE(windowed.allocate_slots(w, 1));
  EXPECT_EQ(windowed.window_block_table(w), (Ids{kReleased, 1, 2, 0}));
}

}  // namespace
}  // namespace koi::engine
