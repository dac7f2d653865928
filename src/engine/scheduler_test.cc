#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <numeric>

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 4;

Ids iota_tokens(int n, int32_t first) {
  Ids ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), first);
  return ids;
}

std::unique_ptr<Request> make_request(std::string id, int prompt_len, int priority, int64_t arrival,
                                      SamplingParams params = {}) {
  params.max_tokens = params.max_tokens == 16 ? 100 : params.max_tokens;
  return std::make_unique<Request>(std::move(id), iota_tokens(prompt_len, 1000 * static_cast<int>(arrival)),
                                   params, priority, arrival, 0, 0);
}

// (id, tokens) for each scheduled request, in order.
std::vector<std::pair<std::string, int>> plan(const SchedulerOutput& out) {
  std::vector<std::pair<std::string, int>> p;
  for (const auto& s : out.scheduled) p.emplace_back(s.request->id, s.num_tokens);
  return p;
}

SampledToken tok(int32_t token) {
  SampledToken t;
  t.token = token;
  return t;
}

// Feeds back one token (7) to every scheduled request that reached the end of its tokens.
std::vector<RequestOutput> step_update(Scheduler& s, const SchedulerOutput& out, int32_t token = 7) {
  std::vector<std::vector<SampledToken>> tokens;
  for (const auto& sr : out.scheduled) {
    const bool samples = sr.request->num_computed_tokens + sr.num_tokens == sr.request->num_tokens();
    tokens.push_back(samples ? std::vector<SampledToken>{tok(token)} : std::vector<SampledToken>{});
  }
  return s.update(out, tokens);
}

struct Fixture {
  Fixture(int num_blocks, SchedulerConfig config, bool prefix_caching = false)
      : kv(num_blocks, kBlockSize, prefix_caching), scheduler(std::move(config), kv) {}
  KvCacheManager kv;
  Scheduler scheduler;
};

SchedulerConfig config(int budget, int max_seqs, int max_len = 1000) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = max_seqs;
  c.max_model_len = max_len;
  c.eos_token_ids = {2};
  return c;
}

using Plan = std::vector<std::pair<std::string, int>>;

TEST(SchedulerTest, ChunkedPrefillSharesTheBudgetWithDecodes) {
  Fixture f(16, config(8, 4));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 10, 0, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 5, 0, 1)).ok());

  auto out = s.schedule();  // a's first chunk takes the whole budget
  EXPECT_EQ(plan(out), (Plan{{"a", 8}}));
  EXPECT_EQ(out.num_batched_tokens, 8);
  EXPECT_TRUE(step_update(s, out).empty());
  EXPECT_EQ(s.find("a")->num_computed_tokens, 8);
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(s.num_waiting(), 1);

  out = s.schedule();  // a finishes its prompt, b gets the remaining 6 and needs 5
  EXPECT_EQ(plan(out), (Plan{{"a", 2}, {"b", 5}}));
  auto outputs = step_update(s, out);
  ASSERT_EQ(outputs.size(), 2u);
  EXPECT_EQ(outputs[0].token_ids, (Ids{7}));
  EXPECT_EQ(s.find("a")->num_tokens(), 11);
  EXPECT_EQ(s.find("a")->num_computed_tokens, 10);

  out = s.schedule();  // both decode
  EXPECT_EQ(plan(out), (Plan{{"a", 1}, {"b", 1}}));
  EXPECT_EQ(f.kv.block_table(*s.find("a")).size(), 3u);
  EXPECT_EQ(f.kv.block_table(*s.find("b")).size(), 2u);
}

TEST(SchedulerTest, MaxNumSeqsLimitsAdmission) {
  Fixture f(16, config(100, 2));
  Scheduler& s = f.scheduler;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(s.add(make_request(std::to_string(i), 3, 0, i)).ok());
  auto out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"0", 3}, {"1", 3}}));
  EXPECT_EQ(s.num_waiting(), 1);
}

TEST(SchedulerTest, PriorityOrdersAdmission) {
  Fixture f(16, config(100, 1));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("late-but-urgent", 3, -1, 5)).ok());
  ASSERT_TRUE(s.add(make_request("early", 3, 0, 1)).ok());
  EXPECT_EQ(plan(s.schedule()), (Plan{{"late-but-urgent", 3}}));
}

// 4 blocks of 4 tokens; a and b hold 2 blocks each; when a needs a third block the
// latest arrival (b) is preempted and waits with its output kept.
TEST(SchedulerTest, PreemptsLatestArrivalWhenBlocksRunOut) {
  Fixture f(4, config(100, 4));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 7, 0, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 7, 0, 1)).ok());
  auto out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"a", 7}, {"b", 7}}));
  step_update(s, out);
  out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"a", 1}, {"b", 1}}));
  step_update(s, out);
  EXPECT_EQ(f.kv.pool().num_free_blocks(), 0);

  out = s.schedule();  // a needs block 3 for position 8
  EXPECT_EQ(plan(out), (Plan{{"a", 1}}));
  EXPECT_EQ(out.preempted, (std::vector<std::string>{"b"}));
  EXPECT_EQ(s.num_preemptions(), 1);
  const Request* b = s.find("b");
  EXPECT_EQ(b->status, RequestStatus::kWaiting);
  EXPECT_EQ(b->num_computed_tokens, 0);
  EXPECT_EQ(b->num_tokens(), 9);  // 7 prompt + 2 outputs, all to be recomputed
  EXPECT_TRUE(f.kv.block_table(*b).empty());
  EXPECT_EQ(f.kv.block_table(*s.find("a")).size(), 3u);
  step_update(s, out);

  // While a holds 3 of 4 blocks, b (9 tokens = 3 blocks) cannot come back.
  EXPECT_EQ(plan(s.schedule()), (Plan{{"a", 1}}));
}

TEST(SchedulerTest, PreemptsLowestPriorityFirst) {
  Fixture f(4, config(100, 4));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 7, 1, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 7, 0, 1)).ok());  // arrived later, more important
  auto out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"b", 7}, {"a", 7}}));
  step_update(s, out);
  step_update(s, s.schedule());
  out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"b", 1}}));
  EXPECT_EQ(out.preempted, (std::vector<std::string>{"a"}));
}

TEST(SchedulerTest, RequestThatCannotGrowPreemptsItself) {
  Fixture f(4, config(100, 4));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 7, 0, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 8, 0, 1)).ok());
  auto out = s.schedule();
  step_update(s, out);  // a: 8 tokens (2 blocks), b: 9 tokens (2 blocks, needs a 3rd)
  out = s.schedule();
  EXPECT_EQ(plan(out), (Plan{{"a", 1}}));
  EXPECT_EQ(out.preempted, (std::vector<std::string>{"b"}));
}

TEST(SchedulerTest, AbortFreesEveryBlockAndReportsOnce) {
  Fixture f(8, config(100, 4), /*prefix_caching=*/true);
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 9, 0, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 3, 0, 1)).ok());
  step_update(s, s.schedule());
  step_update(s, s.schedule());
  EXPECT_EQ(f.kv.pool().num_free_blocks(), 8 - 3 - 1);
  ASSERT_TRUE(s.abort("a").ok());
  ASSERT_TRUE(s.abort("b").ok());
  EXPECT_EQ(f.kv.pool().num_free_blocks(), 8);
  EXPECT_EQ(s.num_running(), 0);
  EXPECT_FALSE(s.has_unfinished());
  auto aborted = s.take_aborted();
  ASSERT_EQ(aborted.size(), 2u);
  EXPECT_EQ(aborted[0].request_id, "a");
  EXPECT_TRUE(aborted[0].finished);
  EXPECT_EQ(aborted[0].finish_reason, FinishReason::kAbort);
  EXPECT_TRUE(s.take_aborted().empty());
  EXPECT_EQ(s.abort("a").message(), "no unfinished request with id 'a'");
}

TEST(SchedulerTest, AbortWhileWaiting) {
  Fixture f(8, config(100, 1));
  Scheduler& s = f.scheduler;
  ASSERT_TRUE(s.add(make_request("a", 3, 0, 0)).ok());
  ASSERT_TRUE(s.add(make_request("b", 3, 0, 1)).ok());
  s.schedule();
  ASSERT_TRUE(s.abort("b").ok());
  EXPECT_EQ(s.num_waiting(), 0);
}

TEST(SchedulerTest, RejectsRequestsThatCanNeverRun) {
  Fixture f(8, config(100, 4, /*max_len=*/32));
  Scheduler& s = f.scheduler;
  EXPECT_EQ(s.add(make_request("long", 32, 0, 0)).message(),
            "request 'long' has a prompt of 32 tokens, but this engine holds at most 32 tokens per sequence (the "
            "smaller of the model's context and the KV cache), one of them for the first generated token; shorten "
            "the prompt or give the KV cache more memory");
  EXPECT_EQ(s.add(make_request("empty", 0, 0, 0)).message(),
            "request 'empty' has an empty prompt; send at least one token");
  ASSERT_TRUE(s.add(make_request("x", 31, 0, 0)).ok());
  const Status dup = s.add(make_request("x", 3, 0, 1));
  EXPECT_EQ(dup.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(dup.message(), "request id 'x' is already in use; use a unique id");
}

TEST(SchedulerTest, StopConditions) {
  Fixture f(64, config(100, 8, /*max_len=*/12));
  Scheduler& s = f.scheduler;
  SamplingParams p;
  p.max_tokens = 3;
  p.ignore_eos = true;
  ASSERT_TRUE(s.add(make_request("len", 2, 0, 0, p)).ok());
  p.max_tokens = 100;
  p.ignore_eos = false;
  ASSERT_TRUE(s.add(make_request("eos", 2, 0, 1, p)).ok());
  p.ignore_eos = true;
  ASSERT_TRUE(s.add(make_request("ignore", 2, 0, 2, p)).ok());
  p.stop_token_ids = {2};
  ASSERT_TRUE(s.add(make_request("stop-id", 2, 0, 3, p)).ok());
  p.stop_token_ids = {};
  ASSERT_TRUE(s.add(make_request("ctx", 10, 0, 4, p)).ok());

  auto first = step_update(s, s.schedule(), 5);
  EXPECT_EQ(first.size(), 5u);
  auto second = step_update(s, s.schedule(), 2);  // token 2 is EOS
  std::map<std::string, FinishReason> reasons;
  for (const auto& o : second) reasons[o.request_id] = o.finish_reason;
  EXPECT_EQ(reasons["eos"], FinishReason::kStop);
  EXPECT_EQ(reasons["stop-id"], FinishReason::kStop);
  EXPECT_EQ(reasons["ignore"], FinishReason::kNone);
  EXPECT_EQ(reasons["ctx"], FinishReason::kLength);  // 12 tokens = max_model_len
  EXPECT_EQ(reasons["len"], FinishReason::kNone);
  auto third = step_update(s, s.schedule(), 5);
  ASSERT_EQ(third.size(), 2u);
  EXPECT_EQ(third[0].request_id, "len");
  EXPECT_EQ(third[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(s.num_running(), 1);
  EXPECT_EQ(f.kv.pool().num_free_blocks(), 64 - 1);
}

TEST(SchedulerTest, StopStringEndsRequestAndNeverLeaks) {
  Fixture f(16, config(100, 4));
  Scheduler& s = f.scheduler;
  SamplingParams p;
  p.stop = {"STOP"};
  // Tokens 5, 6, 7, 8 read "ok ", "ST", "O", "P tail".
  tokenizer::TokenizerSpec spec;
  spec.tokens = {"a", "b", "c", "d", "e", "ok ", "ST", "O", "P tail"};
  spec.scores.assign(spec.tokens.size(), 0.0f);
  auto detok = tokenizer::Tokenizer::create(spec);
  ASSERT_TRUE(detok.ok());
  auto request = make_request("a", 2, 0, 0, p);
  request->decoder.emplace(&*detok);
  ASSERT_TRUE(s.add(std::move(request)).ok());
  std::string text;
  bool finished = false;
  for (int step = 0; step < 4 && !finished; ++step) {
    auto out = s.schedule();
    std::vector<std::vector<SampledToken>> tokens = {{tok(5 + step)}};
    for (const auto& o : s.update(out, tokens)) {
      text += o.text;
      finished = o.finished;
      if (finished) {
        EXPECT_EQ(o.finish_reason, FinishReason::kStop);
      }
      if (o.text.find('S') != std::string::npos) ADD_FAILURE() << "partial stop string leaked: " << o.text;
    }
  }
  EXPECT_TRUE(finished);
  EXPECT_EQ(text, "ok ");
  EXPECT_EQ(f.kv.pool().num_free_blocks(), 16);
}

}  // namespace
}  // namespace koi::engine
