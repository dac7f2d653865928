// KvIndex (kv_index.h) at toy scale: exact block sets per replica from numbered events, a gap,
// a new epoch and a replica that fell behind all refuse the batch and leave the index as it
// was, a snapshot replaces what a replica held, and match() is the real hit length.
#include "gateway/kv_index.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <numeric>

namespace koi::gateway {
namespace {

using engine::BlockHash;

BlockHash h(uint64_t n) { return {n, n + 100}; }
std::string hex(uint64_t n) { return fmt::format("{:016x}{:016x}", n + 100, n); }

KvFeed events(uint64_t epoch, std::vector<KvEventRecord> e) {
  KvFeed f;
  f.epoch = epoch;
  f.block_size = 16;
  f.last = e.empty() ? 0 : e.back().seq;
  f.events = std::move(e);
  return f;
}

KvFeed snapshot(uint64_t epoch, uint64_t last, std::vector<BlockHash> hashes) {
  KvFeed f;
  f.epoch = epoch;
  f.block_size = 16;
  f.last = last;
  f.hashes = std::move(hashes);
  return f;
}

TEST(KvIndex, AppliesNumberedEventsExactly) {
  KvIndex index;
  EXPECT_FALSE(index.apply("a", events(7, {{1, true, h(1)}})));  // never synced: resync first
  index.reset("a", snapshot(7, 0, {}));
  index.reset("b", snapshot(9, 4, {h(1), h(5)}));
  ASSERT_TRUE(index.apply("a", events(7, {{1, true, h(1)}, {2, true, h(2)}, {3, true, h(3)}})));
  ASSERT_TRUE(index.apply("a", events(7, {{4, false, h(2)}})));
  EXPECT_EQ(index.hashes_of("a"), (std::vector<std::string>{hex(1), hex(3)}));
  EXPECT_EQ(index.holders(h(1)), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(index.holders(h(2)), std::vector<std::string>{});
  EXPECT_EQ(index.num_blocks(), 3u);  // 1, 3, 5
  EXPECT_EQ(index.sync_of("a")->last, 4u);
  // An empty batch at the same number is fine and changes nothing.
  KvFeed nothing = events(7, {});
  nothing.last = 4;
  EXPECT_TRUE(index.apply("a", nothing));
  EXPECT_EQ(index.sync_of("a")->last, 4u);
}

TEST(KvIndex, RefusesAGapANewEpochAndAServerBehindUs) {
  KvIndex index;
  index.reset("a", snapshot(7, 2, {h(1), h(2)}));
  const std::vector<std::string> before{hex(1), hex(2)};
  EXPECT_FALSE(index.apply("a", events(7, {{4, true, h(4)}})));                   // event 3 lost
  EXPECT_FALSE(index.apply("a", events(7, {{3, true, h(3)}, {5, true, h(5)}})));  // 4 lost mid-batch
  EXPECT_FALSE(index.apply("a", events(8, {{3, true, h(3)}})));                   // restarted server
  KvFeed behind = events(7, {});
  behind.last = 1;  // its numbers went back: a restart that kept no epoch
  EXPECT_FALSE(index.apply("a", behind));
  EXPECT_EQ(index.hashes_of("a"), before);
  EXPECT_EQ(index.sync_of("a")->last, 2u);
  // The resync replaces everything: 1 and 2 are gone after the restart.
  index.reset("a", snapshot(8, 10, {h(9)}));
  EXPECT_EQ(index.hashes_of("a"), std::vector<std::string>{hex(9)});
  EXPECT_EQ(index.holders(h(1)), std::vector<std::string>{});
  EXPECT_TRUE(index.apply("a", events(8, {{11, true, h(10)}})));
  index.forget("a");
  EXPECT_FALSE(index.sync_of("a").has_value());
  EXPECT_EQ(index.num_blocks(), 0u);
}

TEST(KvIndex, MatchIsTheLeadingRunOfHeldBlocks) {
  KvIndex index;
  index.reset("a", snapshot(1, 0, {h(1), h(2), h(4)}));
  index.reset("b", snapshot(2, 0, {h(1)}));
  const std::vector<BlockHash> prompt{h(1), h(2), h(3), h(4)};
  EXPECT_EQ(index.match("a", prompt), 2u);  // 4 is held but 3 is not: no prefix past 3
  EXPECT_EQ(index.match("b", prompt), 1u);
  EXPECT_EQ(index.match("c", prompt), 0u);
}

TEST(KvIndex, PromptHashesChainTheBlocksTheEngineCanReuse) {
  std::vector<int32_t> tokens(40);
  std::iota(tokens.begin(), tokens.end(), 1);
  const std::vector<BlockHash> got = prompt_block_hashes(tokens, 16, /*cache_key=*/5);
  ASSERT_EQ(got.size(), 2u);  // the last 8 tokens are not a full block
  const BlockHash first = engine::hash_block({}, std::span(tokens).subspan(0, 16), 5);
  EXPECT_EQ(got[0], first);
  EXPECT_EQ(got[1], engine::hash_block(first, std::span(tokens).subspan(16, 16), 5));
  EXPECT_NE(prompt_block_hashes(tokens, 16, 0)[0], first);  // another salt shares nothing
  // The engine computes the last token whatever it holds: 32 tokens can hit 1 block, 33 two.
  EXPECT_EQ(prompt_block_hashes(std::span(tokens).first(32), 16, 5).size(), 1u);
  EXPECT_EQ(prompt_block_hashes(std::span(tokens).first(33), 16, 5).size(), 2u);
}

TEST(KvIndex, ParsesTheServersFeedAndNamesWhatIsWrong) {
  auto f = parse_kv_feed(R"({"epoch":3,"block_size":16,"last":2,"events":[)"
                         R"({"seq":1,"type":"stored","hash":"00000000000000660000000000000002"},)"
                         R"({"seq":2,"type":"removed","hash":"00000000000000660000000000000002"}]})");
  ASSERT_TRUE(f.ok()) << f.status().message();
  ASSERT_EQ(f->events.size(), 2u);
  EXPECT_EQ(f->events[0].hash, h(2));
  EXPECT_FALSE(f->events[1].stored);
  auto s = parse_kv_feed(R"({"epoch":3,"block_size":16,"last":9,"hashes":["00000000000000660000000000000002"]})");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->hashes, std::vector<BlockHash>{h(2)});
  EXPECT_EQ(parse_kv_feed(R"({"block_size":16,"last":2})").status().message(), "kv feed: 'epoch' must be a number >= 0");
  EXPECT_EQ(parse_kv_feed(R"({"epoch":1,"block_size":16,"last":2,"events":[{"seq":1,"type":"x","hash":""}]})")
                .status()
                .message(),
            "events[0]: 'type' must be \"stored\" or \"removed\"");
  EXPECT_EQ(parse_block_hash("12").status().message(), "a block hash must be 32 hex digits, got '12'");
}

}  // namespace
}  // namespace koi::gateway
