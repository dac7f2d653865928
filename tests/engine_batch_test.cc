// Batch invariance and prefix caching of the engine over real forward passes (issue 3, must
// show 2 and 3): 32 different greedy requests give the same tokens when each runs alone as
// when all run together with chunked prefill, shared prefixes and preemption forced by a
// tiny KV pool — on stories260K, on a random tiny model and on random tiny mixture-of-experts
// models; and a request that shares a
// 1,000-token prefix with an earlier one computes only its new tokens.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/llama_runner.h"
#include "model/llama.h"
#include "model/llama2c.h"
#include "model/random_model.h"

namespace koi::engine {
namespace {

using test_util::greedy;
using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 16;
constexpr int kNumRequests = 32;

// 32 prompts in 4 families: each family shares a 48-token prefix (3 full blocks), then has
// its own suffix of 3 to 130 tokens; outputs of 8 to 39 tokens.
std::vector<RequestSpec> requests(int n_vocab) {
  std::vector<RequestSpec> out;
  for (int r = 0; r < kNumRequests; ++r) {
    Ids prompt = {1};
    const int family = r % 4;
    for (int i = 1; i < 48; ++i) prompt.push_back(3 + (family * 97 + i * 31) % (n_vocab - 3));
    const int suffix = 3 + (r * 37) % 128;
    for (int i = 0; i < suffix; ++i) prompt.push_back(3 + (r * 131 + i * 17) % (n_vocab - 3));
    out.push_back({"r" + std::to_string(r), prompt, greedy(8 + (r * 7) % 32)});
  }
  return out;
}

struct RunResult {
  std::map<std::string, Ids> tokens;
  EngineStats stats;
};

RunResult run(model::LlamaModel& m, int num_blocks, int budget, bool prefix_caching, const std::vector<RequestSpec>& specs) {
  LlamaRunner runner(m, num_blocks, kBlockSize, 2);
  EngineConfig c;
  c.block_size = kBlockSize;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = kNumRequests;
  c.enable_prefix_caching = prefix_caching;
  Engine engine(c, runner);
  RunResult result;
  for (const RequestSpec& s : specs) EXPECT_TRUE(engine.add_request(s).ok());
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      auto& t = result.tokens[o.request_id];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
    }
  }
  result.stats = engine.stats();
  return result;
}

void expect_batch_invariant(model::LlamaModel& m) {
  const std::vector<RequestSpec> specs = requests(m.config().n_vocab);
  std::map<std::string, Ids> alone;
  for (const RequestSpec& s : specs) alone[s.id] = run(m, 32, 4096, false, {s}).tokens[s.id];
  // Together: a 64-token budget chunks every prefill and mixes it with decodes; 24 blocks
  // (384 slots) cannot hold the ~3,000 tokens in flight, so requests are preempted.
  RunResult together = run(m, 24, 64, true, specs);
  for (const RequestSpec& s : specs) {
    ASSERT_EQ(alone[s.id].size(), static_cast<size_t>(s.params.max_tokens)) << s.id;
    EXPECT_EQ(together.tokens[s.id], alone[s.id]) << s.id;
  }
  EXPECT_GT(together.stats.num_preemptions, 0);
  EXPECT_GT(together.stats.prefix_cache_hit_tokens, 0);
}

TEST(EngineBatchTest, Stories260kIsBatchInvariant) {
  auto m = test_util::load_stories260k();
  expect_batch_invariant(*m);
}

TEST(EngineBatchTest, RandomTinyModelIsBatchInvariant) {
  auto m = test_util::random_tiny(7);
  expect_batch_invariant(*m);
}

// Mixture of experts: each token's experts are chosen and summed from its own row alone, so
// routing keeps batch invariance — Mixtral-style (renormalised top-2 of 4) and Qwen2-MoE-style
// (top-2 of 6 without renormalisation, a shared expert with its sigmoid gate).
TEST(EngineBatchTest, RandomTinyMoeModelsAreBatchInvariant) {
  for (bool qwen2_style : {false, true}) {
    model::ModelConfig config = *model::named_shape("tiny-moe");
    if (qwen2_style) config.moe = {.n_experts = 6, .n_experts_used = 2, .expert_ffn_dim = 32, .norm_topk_prob = false,
                                   .shared_ffn_dim = 48};
    model::ModelWeights weights = model::random_weights(config, 11);
    ASSERT_TRUE(model::validate_weights(config, weights).ok());
    model::LlamaModel m(std::move(config), std::move(weights));
    expect_batch_invariant(m);
  }
}

TEST(EngineBatchTest, SharedThousandTokenPrefixIsComputedOnce) {
  auto m = test_util::random_tiny(7);  // context 2048
  Ids prefix = {1};
  for (int i = 1; i < 1000; ++i) prefix.push_back(3 + (i * 53) % 500);
  Ids second_prompt = prefix;
  for (int i = 0; i < 24; ++i) second_prompt.push_back(3 + (i * 11) % 500);
  Ids first_prompt = prefix;
  first_prompt.push_back(7);

  RunResult uncached = run(*m, 160, 4096, false, {{"second", second_prompt, greedy(16)}});
  LlamaRunner runner(*m, 160, kBlockSize, 2);
  EngineConfig c;
  c.block_size = kBlockSize;
  c.num_kv_blocks = 160;
  Engine engine(c, runner);
  auto drain = [&](std::map<std::string, Ids>& tokens) {
    while (engine.has_unfinished()) {
      auto outputs = engine.step();
      ASSERT_TRUE(outputs.ok());
      for (const RequestOutput& o : *outputs) tokens[o.request_id].insert(tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
  };
  std::map<std::string, Ids> tokens;
  ASSERT_TRUE(engine.add_request({"first", first_prompt, greedy(4)}).ok());
  drain(tokens);
  const int64_t computed_before = engine.stats().num_computed_tokens;
  ASSERT_TRUE(engine.add_request({"second", second_prompt, greedy(16)}).ok());
  drain(tokens);
  const EngineStats s = engine.stats();
  // 1000 shared tokens = 62 full blocks (992 tokens) reused; the second request computes
  // its 8 + 24 remaining prompt tokens and 15 decode steps (the 16th token needs no forward).
  EXPECT_EQ(s.prefix_cache_hit_tokens, 992);
  EXPECT_EQ(s.num_computed_tokens - computed_before, 8 + 24 + 15);
  EXPECT_EQ(tokens["second"], uncached.tokens["second"]);
}

}  // namespace
}  // namespace koi::engine
