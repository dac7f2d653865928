// Draft-model speculation over the real stories260K model as the target: greedy output
// must be exactly the output without speculation, with stories260K itself as the draft
// (every draft accepted: the draft KV bookkeeping is exact) and with a random-weight tiny
// model sharing its 512-token vocabulary (few drafts accepted), also under preemption and
// chunked prefill.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>
#include <memory>
#include <string>

#include "engine/engine_test_util.h"
#include "engine/engine.h"
#include "engine/llama_runner.h"
#include "model/llama.h"
#include "model/llama2c.h"
#include "model/random_model.h"

namespace koi::engine {
namespace {

using test_util::greedy;
using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 16;
constexpr int kDraftBlocks = 64;

Ids prompt_of(int len, int32_t salt) {
  Ids p = {1};  // BOS
  for (int i = 1; i < len; ++i) p.push_back(static_cast<int32_t>((salt * 131 + i * 17) % 500) + 3);
  return p;
}

std::vector<RequestSpec> crowd(const SamplingParams& params = greedy(60)) {
  SamplingParams story = params;
  story.max_tokens = 80;
  std::vector<RequestSpec> specs = {{"story", prompt_of(1, 0), story}};
  for (int i = 1; i <= 3; ++i) specs.push_back({"other" + std::to_string(i), prompt_of(20 + 37 * i, i), params});
  return specs;
}

struct CrowdRun {
  std::map<std::string, Ids> tokens;
  EngineStats stats;
  int draft_blocks_free = 0;
};

// Runs the crowd on stories260K with `draft` (null: no speculation).
CrowdRun run_crowd(model::LlamaModel& target, model::LlamaModel* draft, int num_blocks, int budget,
                   const SamplingParams& params = greedy(60)) {
  LlamaRunner target_runner(target, num_blocks, kBlockSize, 1);
  std::unique_ptr<LlamaRunner> draft_runner;
  EngineConfig config;
  config.block_size = kBlockSize;
  config.num_kv_blocks = num_blocks;
  config.max_num_batched_tokens = budget;
  config.max_num_seqs = 16;
  if (draft) {
    draft_runner = std::make_unique<LlamaRunner>(*draft, kDraftBlocks, kBlockSize, 1);
    config.speculative.method = SpeculativeMethod::kDraftModel;
    config.speculative.num_speculative_tokens = 4;
    config.speculative.draft_runner = draft_runner.get();
    config.speculative.draft_num_kv_blocks = kDraftBlocks;
  }
  Engine engine(config, target_runner);
  for (const RequestSpec& s : crowd(params)) EXPECT_TRUE(engine.add_request(s).ok());
  CrowdRun out;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      out.tokens[o.request_id].insert(out.tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
  }
  out.stats = engine.stats();
  if (draft) out.draft_blocks_free = engine.draft_proposer()->pool().num_free_blocks();
  return out;
}

TEST(DraftModelLlamaTest, GreedyOutputIsUnchangedWithStoriesOrRandomDraft) {
  std::unique_ptr<model::LlamaModel> stories = test_util::load_stories260k();
  std::unique_ptr<model::LlamaModel> tiny = test_util::random_tiny(11, stories->config().n_vocab);
  const CrowdRun baseline = run_crowd(*stories, nullptr, 64, 2048);
  ASSERT_EQ(baseline.tokens.at("story").size(), 80u);

  struct Case {
    const char* name;
    model::LlamaModel* draft;
    int num_blocks, budget;
  };
  const std::vector<Case> cases = {
      {"stories draft", stories.get(), 64, 2048},
      {"stories draft, chunked prefill", stories.get(), 64, 48},
      {"stories draft, preemption", stories.get(), 16, 256},  // 256 slots for ~500 tokens
      {"random tiny draft", tiny.get(), 64, 2048},
      {"random tiny draft, preemption", tiny.get(), 16, 256},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const CrowdRun got = run_crowd(*stories, c.draft, c.num_blocks, c.budget);
    EXPECT_EQ(got.tokens, baseline.tokens);
    EXPECT_GT(got.stats.num_draft_tokens, 0);
    if (c.draft == stories.get()) {
      EXPECT_EQ(got.stats.num_accepted_tokens, got.stats.num_draft_tokens);
      EXPECT_LT(got.stats.num_steps, baseline.stats.num_steps);
    } else {
      EXPECT_LT(got.stats.spec_acceptance_rate, 0.2);
    }
    if (c.num_blocks == 16) {
      EXPECT_GT(got.stats.num_preemptions, 0);
    }
    EXPECT_EQ(got.draft_blocks_free, kDraftBlocks);
    std::printf("[ %s ] acceptance %.3f (%lld of %lld drafts), %lld steps (%lld without speculation), "
                "%lld preemptions\n",
                c.name, got.stats.spec_acceptance_rate, static_cast<long long>(got.stats.num_accepted_tokens),
                static_cast<long long>(got.stats.num_draft_tokens), static_cast<long long>(got.stats.num_steps),
                static_cast<long long>(baseline.stats.num_steps), static_cast<long long>(got.stats.num_preemptions));
  }
}

// Sampling with penalties, with stories260K as its own draft: the draft's q and the
// target's p are the same distribution (same logits, same history for the penalties), so
// u * q < p holds for every draft, and a misaligned position or history would show as a
// rejection.
TEST(DraftModelLlamaTest, SamplingWithTheTargetAsDraftAcceptsEveryDraft) {
  std::unique_ptr<model::LlamaModel> stories = test_util::load_stories260k();
  SamplingParams params;
  params.temperature = 0.8f;
  params.top_p = 0.9f;
  // Rewards repeats: if q's history missed the earlier drafts, p would favour them over q
  // and reject other drafts.
  params.frequency_penalty = -1.0f;
  params.repetition_penalty = 1.2f;
  params.seed = 3;
  params.max_tokens = 60;
  params.ignore_eos = true;
  const CrowdRun got = run_crowd(*stories, stories.get(), 64, 2048, params);
  EXPECT_EQ(got.tokens.at("story").size(), 80u);
  EXPECT_GT(got.stats.num_draft_tokens, 100);
  EXPECT_EQ(got.stats.num_accepted_tokens, got.stats.num_draft_tokens);
  EXPECT_EQ(got.draft_blocks_free, kDraftBlocks);
}

}  // namespace
}  // namespace koi::engine
