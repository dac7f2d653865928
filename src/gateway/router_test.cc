// Routing policies, the prefix model and the weighted version split, exact at toy scale.
#include <gtest/gtest.h>

#include "gateway/kv_index.h"
#include "gateway/prefix_cache.h"
#include "gateway/rollout.h"
#include "gateway/router.h"

namespace koi::gateway {
namespace {

TEST(LruBlockSet, MatchesPrefixesAndEvictsLeastRecent) {
  LruBlockSet s(4);
  const std::vector<uint64_t> a{1, 2, 3};
  s.insert(a);
  EXPECT_EQ(s.match_prefix(std::vector<uint64_t>{1, 2, 9}), 2u);
  EXPECT_EQ(s.match_prefix(std::vector<uint64_t>{2, 3}), 2u);
  EXPECT_EQ(s.match_prefix(std::vector<uint64_t>{9, 1}), 0u);
  s.insert(std::vector<uint64_t>{1});      // refresh 1: order 1,3,2
  s.insert(std::vector<uint64_t>{7, 8});  // evicts 2 then... capacity 4: {8,7,1,3}
  EXPECT_EQ(s.size(), 4u);
  EXPECT_EQ(s.match_prefix(std::vector<uint64_t>{1, 2}), 1u);
  EXPECT_EQ(s.match_prefix(std::vector<uint64_t>{3, 7, 8}), 3u);
}

TEST(ChainTextBlocks, EqualPrefixesGiveEqualHashesAndOnlyFullBlocks) {
  auto a = chain_text_blocks("abcdefgh-xyz", 4);
  auto b = chain_text_blocks("abcdefgX-xyz", 4);
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[0], b[0]);
  EXPECT_NE(a[1], b[1]);
  EXPECT_NE(a[2], b[2]);  // chained: a change in block 1 changes every later hash
  EXPECT_EQ(chain_text_blocks("abc", 4).size(), 0u);
}

TEST(Router, RoundRobinAndLeastOutstanding) {
  Router rr(RoutingPolicy::kRoundRobin, {});
  std::vector<Candidate> c{{"a", 5}, {"b", 0}, {"c", 2}};
  EXPECT_EQ(rr.pick({}, c).index, 0u);
  EXPECT_EQ(rr.pick({}, c).index, 1u);
  EXPECT_EQ(rr.pick({}, c).index, 2u);
  EXPECT_EQ(rr.pick({}, c).index, 0u);
  Router lo(RoutingPolicy::kLeastOutstanding, {});
  EXPECT_EQ(lo.pick({}, c).index, 1u);
}

TEST(Router, KvAwareFollowsThePrefixWhileBalancedAndLoadWhenNot) {
  KvAwareOptions kv;
  kv.cache_threshold = 0.5, kv.balance_abs = 4, kv.balance_rel = 1.5;
  Router r(RoutingPolicy::kKvAware, kv);
  const std::vector<uint64_t> conv1{10, 11, 12, 13};
  std::vector<Candidate> c{{"a", 1}, {"b", 0}};
  RouteDecision d = r.pick({conv1, ""}, c);  // no match anywhere: least loaded
  EXPECT_EQ(d.index, 1u);
  EXPECT_EQ(d.matched_blocks, 0u);
  c = {{"a", 0}, {"b", 3}};
  d = r.pick({std::vector<uint64_t>{10, 11, 12, 13, 14}, ""}, c);  // 4 of 5 cached on b
  EXPECT_EQ(d.index, 1u);
  EXPECT_EQ(d.matched_blocks, 4u);
  d = r.pick({std::vector<uint64_t>{10, 99, 98, 97}, ""}, c);  // 1 of 4 < threshold: least loaded
  EXPECT_EQ(d.index, 0u);
  c = {{"a", 0}, {"b", 6}};  // imbalanced: 6 - 0 > 4 and 6 > 1.5 * 0
  d = r.pick({std::vector<uint64_t>{10, 11, 12, 13, 14}, ""}, c);
  EXPECT_EQ(d.index, 0u);
}

TEST(Router, KvEventsRoutesOnWhatTheIndexSaysEachReplicaHolds) {
  KvIndex index;
  std::vector<int32_t> conversation(65);
  for (size_t i = 0; i < conversation.size(); ++i) conversation[i] = static_cast<int32_t>(i);
  const std::vector<engine::BlockHash> prompt = prompt_block_hashes(conversation, 16, 0);  // 4 blocks
  KvFeed b;
  b.epoch = 1, b.block_size = 16;
  b.hashes = {prompt[0], prompt[1], prompt[2]};
  index.reset("b", b);
  KvFeed a = b;
  a.hashes = {prompt[0]};
  index.reset("a", a);
  KvAwareOptions kv;
  kv.cache_threshold = 0.5, kv.balance_abs = 4, kv.balance_rel = 1.5;
  Router r(RoutingPolicy::kKvEvents, kv, &index);
  std::vector<Candidate> c{{"a", 0}, {"b", 2}};
  RouteInput in;
  in.kv_blocks = prompt;
  RouteDecision d = r.pick(in, c);
  EXPECT_EQ(d.index, 1u);  // 3 of 4 blocks on b
  EXPECT_EQ(d.matched_blocks, 3u);
  EXPECT_EQ(d.route_blocks, 4u);
  d = r.pick(in, c);  // nothing is modelled: the index alone decides, and it has not changed
  EXPECT_EQ(d.matched_blocks, 3u);
  index.forget("b");  // b unreachable: it holds nothing for routing
  d = r.pick(in, c);
  EXPECT_EQ(d.index, 0u);  // a's 1 of 4 is under the threshold: least loaded, which is a
  EXPECT_EQ(d.matched_blocks, 1u);
  c = {{"a", 7}, {"b", 0}};  // imbalanced: load wins over a's block
  index.reset("a", b);
  EXPECT_EQ(r.pick(in, c).index, 1u);
}

TEST(Router, SessionAffinityIsStableAndSurvivesOtherReplicasLeaving) {
  Router r(RoutingPolicy::kSession, {});
  std::vector<Candidate> c{{"http://a:1", 0}, {"http://b:1", 0}, {"http://c:1", 0}};
  const size_t first = r.pick({{}, "user-42"}, c).index;
  for (int i = 0; i < 5; ++i) EXPECT_EQ(r.pick({{}, "user-42"}, c).index, first);
  std::vector<Candidate> fewer;
  for (size_t i = 0; i < c.size(); ++i) if (i != (first + 1) % 3) fewer.push_back(c[i]);
  EXPECT_EQ(fewer[r.pick({{}, "user-42"}, fewer).index].id, c[first].id);
  int spread[3] = {0, 0, 0};
  for (int s = 0; s < 300; ++s) ++spread[r.pick({{}, "s" + std::to_string(s)}, c).index];
  for (int n : spread) EXPECT_GT(n, 60);
}

TEST(Router, UnknownPolicyNamesTheChoices) {
  EXPECT_EQ(parse_routing_policy("random").status().message(),
            "routing policy 'random' is unknown; use round_robin, least_outstanding, kv_aware, kv_events or session");
}

TEST(PickWeighted, SplitFollowsTheWeightsWithinStatisticalBounds) {
  Rng rng(7);
  const std::vector<double> w{90, 10, 0};
  int counts[3] = {0, 0, 0};
  const int n = 20000;
  for (int i = 0; i < n; ++i) ++counts[pick_weighted(w, rng)];
  EXPECT_EQ(counts[2], 0);
  // Binomial(20000, 0.1): sd = 42.4; 4 sd bounds.
  EXPECT_NEAR(counts[1], 2000, 170);
  EXPECT_EQ(pick_weighted(std::vector<double>{0, 0}, rng), 2u);
}

}  // namespace
}  // namespace koi::gateway
