// The engine over the real stories260K model (src/model): outputs must not depend on the
// batch, on chunking, on preemption, on prefix caching or on speculative decoding.
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/llama_runner.h"
#include "model/llama.h"
#include "model/llama2c.h"

namespace koi::engine {
namespace {

using test_util::greedy;
using Ids = std::vector<int32_t>;
constexpr int kBlockSize = 16;

// The real LlamaRunner, counting the tokens that go through the model.
class CountingRunner final : public ModelRunner {
 public:
  explicit CountingRunner(int num_blocks) {
    auto loaded = model::load_llama2c(std::string(KOI_SHARED_DIR) + "/models/stories260K/stories260K.bin");
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    model_ = std::make_unique<model::LlamaModel>(std::move(loaded->config), std::move(loaded->weights));
    runner_ = std::make_unique<LlamaRunner>(*model_, num_blocks, kBlockSize, 2);
  }
  int n_vocab() const override { return runner_->n_vocab(); }
  int max_context() const override { return runner_->max_context(); }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    num_tokens_seen_ += batch.num_tokens();
    return runner_->forward(batch, logits);
  }
  int64_t num_tokens_seen_ = 0;

 private:
  std::unique_ptr<model::LlamaModel> model_;
  std::unique_ptr<LlamaRunner> runner_;
};

std::unique_ptr<CountingRunner> make_runner(int num_blocks) { return std::make_unique<CountingRunner>(num_blocks); }

EngineConfig config_with(int num_blocks, int budget) {
  EngineConfig c;
  c.block_size = kBlockSize;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 16;
  return c;
}

Ids prompt_of(int len, int32_t salt) {
  Ids p = {1};  // BOS
  for (int i = 1; i < len; ++i) p.push_back(static_cast<int32_t>((salt * 131 + i * 17) % 500) + 3);
  return p;
}

std::map<std::string, Ids> run(Engine& engine, const std::vector<RequestSpec>& specs) {
  for (const RequestSpec& s : specs) EXPECT_TRUE(engine.add_request(s).ok());
  std::map<std::string, Ids> tokens;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      tokens[o.request_id].insert(tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
  }
  return tokens;
}

// A quantized KV cache keeps batch invariance: each request's greedy tokens are the same alone
// and in a batch with chunked prefill, with f16 and q8_0 KV (a random model with heads of 32
// values, so q8_0 fits).
TEST(EngineModelTest, QuantizedKvGreedyIsTheSameAloneAndBatched) {
  model::ModelConfig config = *model::named_shape("tiny");
  config.n_heads = 2, config.n_kv_heads = 1, config.head_dim = config.dim / config.n_heads;
  model::LlamaModel model(config, model::random_weights(config, 4));
  std::vector<RequestSpec> crowd;
  for (int i = 0; i < 4; ++i) crowd.push_back({"r" + std::to_string(i), prompt_of(10 + 29 * i, i), greedy(30)});
  for (DType dtype : {DType::kF16, DType::kQ8_0}) {
    SCOPED_TRACE(dtype_name(dtype));
    std::map<std::string, Ids> alone;
    for (const RequestSpec& s : crowd) {
      LlamaRunner runner(model, 64, kBlockSize, 1, dtype);
      Engine engine(config_with(64, 2048), runner);
      alone[s.id] = run(engine, {s})[s.id];
      EXPECT_EQ(alone[s.id].size(), 30u);
    }
    LlamaRunner runner(model, 64, kBlockSize, 2, dtype);
    Engine engine(config_with(64, 24), runner);  // chunked prefill beside decode tokens
    EXPECT_EQ(run(engine, crowd), alone);
  }
}

// Sampling runs on the runner's threads between forward passes (Engine::step): seeded requests
// at temperature 0.9 draw the same tokens alone on a one-thread runner and batched (12 at once,
// spread over the threads) on a two-thread one.
TEST(EngineModelTest, SeededSamplingIsTheSameAloneAndBatchedOnThePool) {
  std::unique_ptr<model::LlamaModel> model = test_util::random_tiny(6);
  std::vector<RequestSpec> crowd;
  for (int i = 0; i < 12; ++i) {
    SamplingParams p;
    p.temperature = 0.9f;
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.seed = 100 + i;
    crowd.push_back({"r" + std::to_string(i), prompt_of(5 + 3 * i, i), p});
  }
  std::map<std::string, Ids> alone;
  for (const RequestSpec& s : crowd) {
    LlamaRunner runner(*model, 64, kBlockSize, 1);
    Engine engine(config_with(64, 2048), runner);
    alone[s.id] = run(engine, {s})[s.id];
    EXPECT_EQ(alone[s.id].size(), 20u);
  }
  LlamaRunner runner(*model, 64, kBlockSize, 2);
  Engine engine(config_with(64, 2048), runner);
  EXPECT_EQ(run(engine, crowd), alone);
}

// Sliding-window layers that keep only their window (LlamaRunner split_windows: the window
// table of KvCacheManager) give the same greedy tokens as a cache that keeps every block, across
// chunked prefill, a batch and a prefix-cache hit, while a sequence's blocks stay bounded: its
// full table plus the 3 blocks that 24 positions of a window can touch (5 while a 32-token
// prefill chunk is read), each half the size of an unsplit block (2 of the 4 layers).
TEST(EngineModelTest, SlidingWindowKvKeepsOnlyTheWindowAndTheOutput) {
  model::ModelConfig config = *model::named_shape("tiny");
  config.n_layers = 4, config.sliding_window = 24, config.sliding_pattern = 2;  // layers 0 and 2 windowed
  model::LlamaModel model(config, model::random_weights(config, 11));
  const Ids shared = prompt_of(70, 3);
  Ids longer = shared;
  longer.insert(longer.end(), {7, 8, 9, 10, 11, 12, 13, 14, 15});
  struct Run {
    std::map<std::string, Ids> tokens;
    int peak_blocks = 0;      // in use at once, over the run of "a" alone
    int64_t block_bytes = 0;
    int64_t hit_tokens = 0;
  };
  auto run_with = [&](bool split) {
    LlamaRunner runner(model, 64, kBlockSize, 1, DType::kF32, split);
    Engine engine(config_with(64, 32), runner);  // prefill in chunks of 32 tokens
    Run out;
    out.block_bytes = runner.kv_cache().shape().bytes_per_block();
    EXPECT_TRUE(engine.add_request({"a", shared, greedy(90)}).ok());
    size_t a_len = shared.size();
    while (engine.has_unfinished()) {
      auto outputs = engine.step();
      EXPECT_TRUE(outputs.ok());
      if (!outputs.ok()) break;
      for (const RequestOutput& o : *outputs) {
        out.tokens[o.request_id].insert(out.tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
      }
      const int in_use = engine.kv_cache().pool().num_blocks() - engine.kv_cache().pool().num_free_blocks();
      out.peak_blocks = std::max(out.peak_blocks, in_use);
      a_len = shared.size() + out.tokens["a"].size();
      if (split && a_len > shared.size() + 1) {  // decoding: the full table plus at most 3 window blocks
        EXPECT_LE(in_use, static_cast<int>((a_len + kBlockSize - 1) / kBlockSize) + 3) << a_len;
      }
    }
    // b shares a's 70-token prompt, batched with c.
    const std::map<std::string, Ids> bc =
        run(engine, {{"b", longer, greedy(40)}, {"c", prompt_of(50, 9), greedy(40)}});
    out.tokens.insert(bc.begin(), bc.end());
    out.hit_tokens = engine.stats().prefix_cache_hit_tokens;
    return out;
  };
  const Run whole = run_with(false), windowed = run_with(true);
  EXPECT_EQ(windowed.tokens, whole.tokens);
  EXPECT_EQ(windowed.tokens.at("a").size(), 90u);
  EXPECT_EQ(windowed.hit_tokens, 64);  // b hits a's first 4 blocks in both tables
  EXPECT_EQ(whole.hit_tokens, 64);
  EXPECT_EQ(windowed.block_bytes * 2, whole.block_bytes);
  EXPECT_EQ(whole.peak_blocks, 10);     // 160 tokens
  EXPECT_EQ(windowed.peak_blocks, 13);  // 10 + 3
}

TEST(EngineModelTest, GreedyOutputIsTheSameAloneBatchedPreemptedAndSpeculated) {
  const RequestSpec target{"target", prompt_of(1, 0), greedy(80)};
  std::vector<RequestSpec> crowd = {target};
  for (int i = 1; i <= 3; ++i) crowd.push_back({"other" + std::to_string(i), prompt_of(20 + 37 * i, i), greedy(60)});

  auto alone_runner = make_runner(64);
  Engine alone(config_with(64, 2048), *alone_runner);
  const Ids expected = run(alone, {target})["target"];
  ASSERT_EQ(expected.size(), 80u);

  auto batched_runner = make_runner(64);
  Engine batched(config_with(64, 48), *batched_runner);  // chunked prefill beside decodes
  EXPECT_EQ(run(batched, crowd)["target"], expected);

  auto small_runner = make_runner(16);  // 256 slots for ~500 tokens: preemption
  Engine preempting(config_with(16, 256), *small_runner);
  EXPECT_EQ(run(preempting, crowd)["target"], expected);
  EXPECT_GT(preempting.stats().num_preemptions, 0);

  auto spec_runner = make_runner(64);
  EngineConfig spec_config = config_with(64, 2048);
  spec_config.speculative.num_speculative_tokens = 4;
  Engine speculating(spec_config, *spec_runner);
  EXPECT_EQ(run(speculating, crowd)["target"], expected);
  EXPECT_GT(speculating.stats().num_draft_tokens, 0);
}

TEST(EngineModelTest, SharedPrefixIsComputedOnceWithTheSameOutput) {
  // stories260K has a 512-token context, so the shared prefix is 400 tokens (25 blocks).
  const Ids prefix = prompt_of(400, 9);
  Ids prompt_b = prefix;
  prompt_b.insert(prompt_b.end(), {10, 20, 30, 40, 50, 60, 70});
  Ids prompt_a = prefix;
  prompt_a.push_back(99);

  auto fresh_runner = make_runner(64);
  EngineConfig no_cache = config_with(64, 2048);
  no_cache.enable_prefix_caching = false;
  Engine fresh(no_cache, *fresh_runner);
  const Ids expected = run(fresh, {{"b", prompt_b, greedy(30)}})["b"];

  auto runner = make_runner(64);
  Engine engine(config_with(64, 2048), *runner);
  run(engine, {{"a", prompt_a, greedy(5)}});
  const int64_t seen = runner->num_tokens_seen_;
  EXPECT_EQ(run(engine, {{"b", prompt_b, greedy(30)}})["b"], expected);
  EXPECT_EQ(engine.stats().prefix_cache_hit_tokens, 400);
  EXPECT_EQ(runner->num_tokens_seen_ - seen, 7 + 29);  // 7 new prompt tokens, 29 decodes
}

}  // namespace
}  // namespace koi::engine
