// Engine::last_step(): the batch composition and timings of the last model-running step.
#include <gtest/gtest.h>

#include "engine/engine.h"

namespace koi::engine {
namespace {

constexpr int kVocab = 16;

// Logits that make token 1 the greedy pick; each forward advances the fake clock 2 ms.
class ConstantRunner final : public ModelRunner {
 public:
  explicit ConstantRunner(FakeClock* clock) : clock_(clock) {}
  int n_vocab() const override { return kVocab; }
  int max_context() const override { return 256; }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    clock_->advance_ns(2'000'000);
    for (size_t row = 0; row < batch.logit_indices.size(); ++row) {
      for (int v = 0; v < kVocab; ++v) logits[row * kVocab + v] = v == 1 ? 1.0f : 0.0f;
    }
    return ok_status();
  }

 private:
  FakeClock* clock_;
};

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

TEST(EngineStepStats, CountsPrefillAndDecodeAndTimesTheForward) {
  FakeClock clock;
  ConstantRunner runner(&clock);
  EngineConfig config;
  config.block_size = 4, config.num_kv_blocks = 64, config.max_num_batched_tokens = 64, config.max_num_seqs = 8;
  Engine engine(config, runner, clock);
  EXPECT_EQ(engine.last_step().number, 0);
  ASSERT_TRUE(engine.add_request({"a", {1, 2, 3, 4, 5, 6}, greedy(3)}).ok());
  ASSERT_TRUE(engine.step().ok());  // a's prompt
  StepStats s = engine.last_step();
  EXPECT_EQ(s.number, 1);
  EXPECT_EQ(s.num_prefill_requests, 1);
  EXPECT_EQ(s.num_prefill_tokens, 6);
  EXPECT_EQ(s.num_decode_requests, 0);
  EXPECT_DOUBLE_EQ(s.forward_seconds, 0.002);
  EXPECT_DOUBLE_EQ(s.total_seconds, 0.002);  // only the forward advances the clock
  EXPECT_DOUBLE_EQ(s.schedule_seconds, 0.0);

  ASSERT_TRUE(engine.add_request({"b", {7, 8, 9}, greedy(3)}).ok());
  ASSERT_TRUE(engine.step().ok());  // a decodes, b prefills
  s = engine.last_step();
  EXPECT_EQ(s.number, 2);
  EXPECT_EQ(s.num_decode_requests, 1);
  EXPECT_EQ(s.num_decode_tokens, 1);
  EXPECT_EQ(s.num_prefill_requests, 1);
  EXPECT_EQ(s.num_prefill_tokens, 3);
  EXPECT_EQ(engine.stats().num_steps, s.number);
}

}  // namespace
}  // namespace koi::engine
