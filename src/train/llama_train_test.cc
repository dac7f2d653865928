#include "train/llama_train.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "model/llama.h"
#include "model/random_model.h"

namespace koi::train {
namespace {

model::ModelConfig tiny_config(bool tied) {
  model::ModelConfig c;
  c.dim = 32, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.ffn_dim = 48, c.n_vocab = 40;
  c.max_seq_len = 16, c.tied_embeddings = tied, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

void make_batch(int B, int T, int vocab, std::vector<int32_t>* in, std::vector<int32_t>* tg) {
  in->resize(static_cast<size_t>(B * T));
  tg->resize(in->size());
  for (int i = 0; i < B * T; ++i) (*in)[i] = (i * 7 + 3) % vocab, (*tg)[i] = (i * 13 + 1) % vocab;
}

TEST(ParamLayout, NamesShapesAndOffsetsTileTheBuffer) {
  std::vector<ParamTensor> tied = param_layout(tiny_config(true));
  std::vector<ParamTensor> untied = param_layout(tiny_config(false));
  ASSERT_EQ(tied.size(), 1u + 2 * 9 + 1);
  EXPECT_EQ(untied.size(), tied.size() + 1);
  EXPECT_EQ(tied[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(tied[0].shape, (std::vector<int64_t>{40, 32}));
  EXPECT_EQ(tied[2].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(tied[3].shape, (std::vector<int64_t>{16, 32}));  // k_proj: kv_dim x dim
  EXPECT_EQ(untied.back().name, "lm_head.weight");
  EXPECT_FALSE(tied[1].decay);  // input_layernorm
  EXPECT_TRUE(tied[2].decay);
  int64_t offset = 0;
  for (const ParamTensor& t : untied) {
    EXPECT_EQ(t.offset, offset) << t.name;
    offset += t.size;
  }
  EXPECT_EQ(offset, tiny_config(false).num_parameters());
}

// The training forward pass and the engine's forward pass agree on the logits' loss.
TEST(LlamaTrain, LossMatchesTheInferenceForwardPass) {
  const model::ModelConfig c = tiny_config(false);
  ThreadPool pool(2);
  auto m = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(m->load(model::random_weights(c, 3)).ok());
  std::vector<int32_t> in, tg;
  make_batch(1, 12, c.n_vocab, &in, &tg);
  const float loss = m->forward(in.data(), tg.data(), 1, 12);

  model::LlamaModel inf(c, model::random_weights(c, 3));
  model::KvCache kv(inf.kv_shape(1, 16));
  std::vector<int32_t> blocks{0};
  model::ForwardBatch batch;
  batch.sequences.push_back({blocks});
  for (int t = 0; t < 12; ++t) {
    batch.token_ids.push_back(in[t]);
    batch.positions.push_back(t);
    batch.seq_index.push_back(0);
    batch.logit_indices.push_back(t);
  }
  std::vector<float> logits(12 * c.n_vocab);
  ASSERT_TRUE(inf.forward(batch, kv, logits.data(), &pool).ok());
  double want = 0.0;
  for (int t = 0; t < 12; ++t) {
    const float* row = logits.data() + t * c.n_vocab;
    double sum = 0.0;
    for (int v = 0; v < c.n_vocab; ++v) sum += std::exp(double{row[v]});
    want += std::log(sum) - row[tg[t]];
  }
  EXPECT_NEAR(loss, want / 12, 1e-5);
}

// Two half batches with half the loss scale give the gradient of the whole batch.
TEST(LlamaTrain, GradientAccumulationEqualsTheFullBatch) {
  const model::ModelConfig c = tiny_config(true);
  ThreadPool pool(2);
  auto m = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(m.ok());
  m->init_random(5);
  std::vector<int32_t> in, tg;
  make_batch(4, 8, c.n_vocab, &in, &tg);
  m->zero_grad();
  m->forward(in.data(), tg.data(), 4, 8);
  m->backward(1.0f / 32);
  const std::vector<float> full = m->grads();
  m->zero_grad();
  m->forward(in.data(), tg.data(), 2, 8);
  m->backward(1.0f / 32);
  m->forward(in.data() + 16, tg.data() + 16, 2, 8);
  m->backward(1.0f / 32);
  double max_diff = 0.0, max_abs = 0.0;
  for (size_t i = 0; i < full.size(); ++i) {
    max_diff = std::max(max_diff, std::fabs(double{full[i]} - m->grads()[i]));
    max_abs = std::max(max_abs, std::fabs(double{full[i]}));
  }
  EXPECT_GT(max_abs, 0.0);
  EXPECT_LE(max_diff, 1e-5 * max_abs);
}

// Resumed runs rely on this: the same inputs give bit-identical gradients on any number of threads.
TEST(LlamaTrain, GradientsAreBitIdenticalAcrossThreadCounts) {
  const model::ModelConfig c = tiny_config(false);
  std::vector<int32_t> in, tg;
  make_batch(3, 16, c.n_vocab, &in, &tg);
  std::vector<std::vector<float>> grads;
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    auto m = LlamaTrain::create(c, &pool);
    ASSERT_TRUE(m.ok());
    m->init_random(9);
    m->zero_grad();
    m->forward(in.data(), tg.data(), 3, 16);
    m->backward(1.0f / 48);
    grads.push_back(m->grads());
  }
  EXPECT_EQ(grads[0], grads[1]);
  EXPECT_EQ(grads[0], grads[2]);
}

TEST(LlamaTrain, RejectsRopeScaling) {
  model::ModelConfig c = tiny_config(false);
  c.rope_scaling.enabled = true;
  ThreadPool pool(1);
  auto m = LlamaTrain::create(c, &pool);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().message(), "training a model with rope scaling is not supported; train without it");
}

TEST(LlamaTrain, InitRandomHasGpt2Statistics) {
  const model::ModelConfig c = tiny_config(true);
  ThreadPool pool(1);
  auto m = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(m.ok());
  m->init_random(1);
  for (const ParamTensor& t : m->layout()) {
    const float* p = m->params().data() + t.offset;
    if (t.shape.size() == 1) {
      EXPECT_EQ(p[0], 1.0f) << t.name;  // only norms in this config
      continue;
    }
    double ss = 0.0;
    for (int64_t i = 0; i < t.size; ++i) ss += double{p[i]} * p[i];
    const double want = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos
                            ? 0.02 / std::sqrt(4.0)
                            : 0.02;
    EXPECT_NEAR(std::sqrt(ss / t.size), want, 0.15 * want) << t.name;
  }
}

}  // namespace
}  // namespace koi::train
