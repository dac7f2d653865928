#include "train/perplexity.h"

#include <gtest/gtest.h>

#include <cmath>

#include "model/random_model.h"
#include "train/llama_train.h"

namespace koi::train {
namespace {

model::ModelConfig config() {
  model::ModelConfig c;
  c.dim = 32, c.n_layers = 1, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.ffn_dim = 40, c.n_vocab = 30;
  c.max_seq_len = 8, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

// One window: the mean loss equals the training forward pass's loss on the same tokens.
TEST(Perplexity, OneWindowEqualsTheTrainingLoss) {
  const model::ModelConfig c = config();
  ThreadPool pool(2);
  model::LlamaModel m(c, model::random_weights(c, 4));
  const std::vector<int32_t> tokens{1, 5, 9, 2, 28, 7, 7, 3};
  auto r = evaluate_perplexity(m, tokens, 8, 4, &pool);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->tokens, 7);
  EXPECT_EQ(r->windows, 1);
  auto t = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(t->load(model::random_weights(c, 4)).ok());
  const float loss = t->forward(tokens.data(), tokens.data() + 1, 1, 7);
  EXPECT_NEAR(r->loss, loss, 1e-5);
  EXPECT_NEAR(r->perplexity, std::exp(r->loss), 1e-9);
}

// Every token after the first is scored exactly once across overlapping windows.
TEST(Perplexity, StridedWindowsScoreEachTokenOnce) {
  const model::ModelConfig c = config();
  ThreadPool pool(1);
  model::LlamaModel m(c, model::random_weights(c, 4));
  std::vector<int32_t> tokens(21);
  for (int i = 0; i < 21; ++i) tokens[i] = (i * 11) % 30;
  auto r = evaluate_perplexity(m, tokens, 8, 4, &pool);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->tokens, 20);
  EXPECT_EQ(r->windows, 5);  // windows start at 0, 4, 8, 12, 16 (the last scores token 20 alone)
  EXPECT_EQ(evaluate_perplexity(m, tokens, 9, 4, &pool).status().message(),
            "the context must be between 2 and the model's 8 tokens, got 9");
  EXPECT_EQ(evaluate_perplexity(m, {3}, 8, 4, &pool).status().message(),
            "the text has 1 tokens; at least 2 are needed");
}

// The progress callback sees every window, the counts growing to the final result.
TEST(Perplexity, ProgressReportsEachWindowUpToTheResult) {
  const model::ModelConfig c = config();
  ThreadPool pool(1);
  model::LlamaModel m(c, model::random_weights(c, 4));
  std::vector<int32_t> tokens(21);
  for (int i = 0; i < 21; ++i) tokens[i] = (i * 7) % 30;
  std::vector<PerplexityProgress> seen;
  auto r = evaluate_perplexity(m, tokens, 8, 4, &pool, [&](const PerplexityProgress& p) { seen.push_back(p); });
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(seen.size(), 5u);
  std::vector<int64_t> scored;
  for (const PerplexityProgress& p : seen) {
    scored.push_back(p.so_far.tokens);
    EXPECT_EQ(p.total_tokens, 20);
  }
  EXPECT_EQ(scored, (std::vector<int64_t>{7, 11, 15, 19, 20}));
  EXPECT_EQ(seen.back().so_far.loss, r->loss);
  EXPECT_EQ(seen.back().so_far.perplexity, r->perplexity);
}

}  // namespace
}  // namespace koi::train
