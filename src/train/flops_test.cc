#include "train/flops.h"

#include <gtest/gtest.h>

#include "train/llama_train.h"

namespace koi::train {
namespace {

model::ModelConfig config(bool tied) {
  model::ModelConfig c;
  c.dim = 64, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 16, c.ffn_dim = 96, c.n_vocab = 50;
  c.max_seq_len = 32, c.tied_embeddings = tied, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

// The independent reference: PaLM's 6N + 12 L H Q T per training token (N the parameters
// that take part in a matmul, the LM head included), with the causal mask halving the
// attention term to (T + 1) / 2 keys, N taken from the real model's parameter layout (every
// parameter minus the RMSNorm weights; untied, the embedding table is a lookup, not a matmul).
double palm_train_flops(const model::ModelConfig& c, int T) {
  ThreadPool pool(1);
  auto m = LlamaTrain::create(c, &pool);
  EXPECT_TRUE(m.ok());
  double n = static_cast<double>(m->params().size()) - (2.0 * c.n_layers + 1) * c.dim;
  if (!c.tied_embeddings) n -= static_cast<double>(c.n_vocab) * c.dim;
  return 6.0 * n + 6.0 * c.n_layers * c.q_dim() * (T + 1);
}

TEST(ModelFlops, MatchesSixNPlusAttentionFromTheParameterLayout) {
  for (bool tied : {true, false}) {
    for (int T : {1, 16, 32}) {
      const model::ModelConfig c = config(tied);
      EXPECT_DOUBLE_EQ(train_flops_per_token(model_flops(c, T), false), palm_train_flops(c, T)) << tied << " " << T;
    }
  }
}

// With experts only the k routed to count: 6 N_active, N_active being the layout's parameters
// less the E - k experts of each layer a token does not visit (router, shared expert and its
// gate included).
TEST(ModelFlops, MixtureOfExpertsCountsTheRoutedExpertsOnly) {
  model::ModelConfig c = config(false);
  c.arch = "qwen2";
  c.moe = {.n_experts = 6, .n_experts_used = 2, .expert_ffn_dim = 24, .shared_ffn_dim = 40};
  const int T = 16;
  const double idle = 3.0 * c.dim * c.moe.expert_ffn_dim * (c.moe.n_experts - c.moe.n_experts_used) * c.n_layers;
  EXPECT_DOUBLE_EQ(train_flops_per_token(model_flops(c, T), false), palm_train_flops(c, T) - 6.0 * idle);
}

TEST(ModelFlops, FrozenBaseCostsTwoForwards) {
  const ModelFlops f = model_flops(config(true), 32);
  EXPECT_DOUBLE_EQ(train_flops_per_token(f, true), 2.0 * f.forward_per_token());
  EXPECT_DOUBLE_EQ(f.forward_per_token(), f.layer.total() * 3 + f.lm_head);
}

TEST(ModelFlops, MeasuredPeakIsAPlausibleRate) {
  ThreadPool pool(1);
  const double peak = measure_peak_flops(&pool, 2);
  EXPECT_GT(peak, 1e8);   // any core since 2000 does 0.1 GFLOP/s
  EXPECT_LT(peak, 1e13);  // one core cannot do 10 TFLOP/s of fp32
}

}  // namespace
}  // namespace koi::train
