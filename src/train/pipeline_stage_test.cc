// LlamaTrain's layer ranges and activation sets, as pipeline.h drives them, in one process:
// a model cut into stages that hand each other the residual stream and its gradient, with
// several micro-batches in flight, computes bitwise the loss and the per-layer gradients of
// the whole model accumulating the same micro-batches. The MPI runs are
// tests/train_mpi_pipeline.sh.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/random_model.h"
#include "train/llama_train.h"
#include "train/pipeline.h"

namespace koi::train {
namespace {

model::ModelConfig config(bool tied) {
  model::ModelConfig c;
  c.dim = 32, c.n_layers = 3, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 8, c.ffn_dim = 48, c.n_vocab = 40;
  c.max_seq_len = 16, c.tied_embeddings = tied, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

TEST(StageLayers, SplitsContiguouslyWithTheRemainderFirst) {
  EXPECT_EQ(stage_layers(5, 2, 0).begin, 0);
  EXPECT_EQ(stage_layers(5, 2, 0).end, 3);
  EXPECT_EQ(stage_layers(5, 2, 1).begin, 3);
  EXPECT_EQ(stage_layers(5, 2, 1).end, 5);
  EXPECT_EQ(stage_layers(4, 4, 3).size(), 1);
}

// Two stages (layers [0, 2) and [2, 3)) run micro-batches 0 and 1 forward, then both
// backward, handing activations and gradients over by hand.
void expect_stages_match_whole_model(bool tied) {
  const model::ModelConfig c = config(tied);
  ThreadPool pool(2);
  auto whole = LlamaTrain::create(c, &pool);
  auto s0 = LlamaTrain::create(c, &pool);
  auto s1 = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(whole.ok() && s0.ok() && s1.ok());
  for (LlamaTrain* m : {&*whole, &*s0, &*s1}) ASSERT_TRUE(m->load(model::random_weights(c, 5)).ok());
  s0->set_layer_range(0, 2);
  s1->set_layer_range(2, 3);
  const int B = 2, T = 12, N = B * T;
  const float scale = 1.0f / (2 * N);
  std::vector<std::vector<int32_t>> in(2), tg(2);
  for (int mb = 0; mb < 2; ++mb) {
    for (int i = 0; i < N; ++i) {
      in[mb].push_back((i * 7 + 3 + mb) % c.n_vocab);
      tg[mb].push_back((i * 13 + mb) % c.n_vocab);
    }
  }
  // Whole model: accumulate micro-batch 0 then 1.
  whole->zero_grad();
  std::vector<float> whole_loss;
  for (int mb = 0; mb < 2; ++mb) {
    whole_loss.push_back(whole->forward(in[mb].data(), tg[mb].data(), B, T));
    whole->backward(scale);
  }
  // Stages: both forwards, then both backwards, each micro-batch in its own activation set.
  s0->zero_grad(), s1->zero_grad();
  std::vector<LlamaTrain::SavedActivations> held0(2), held1(2);
  for (int mb = 0; mb < 2; ++mb) {
    s0->swap_activations(held0[mb]);
    EXPECT_EQ(s0->forward(in[mb].data(), tg[mb].data(), B, T), 0.0f);  // no head on stage 0
    s1->swap_activations(held1[mb]);
    std::copy_n(s0->stage_output(), N * c.dim, s1->stage_input(B, T));
    EXPECT_EQ(s1->forward(in[mb].data(), tg[mb].data(), B, T), whole_loss[mb]);
    s0->swap_activations(held0[mb]), s1->swap_activations(held1[mb]);
  }
  for (int mb = 0; mb < 2; ++mb) {
    s1->swap_activations(held1[mb]);
    s1->backward(scale);
    s0->swap_activations(held0[mb]);
    std::copy_n(s1->stage_input_grad(), N * c.dim, s0->stage_output_grad(B, T));
    s0->backward(scale);
    s0->swap_activations(held0[mb]), s1->swap_activations(held1[mb]);
  }
  // Every tensor's gradient from the stage that owns it; the tied table gets both stages'.
  for (const ParamTensor& t : whole->layout()) {
    const bool on_last = t.name.starts_with("model.layers.2.") || t.name == "model.norm.weight" ||
                         t.name == "lm_head.weight";
    const std::vector<float>& g = on_last ? s1->grads() : s0->grads();
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      float got = g[i];
      if (tied && t.name == "model.embed_tokens.weight") got += s1->grads()[i];
      if (tied && t.name == "model.embed_tokens.weight") {
        ASSERT_NEAR(got, whole->grads()[i], 1e-6f * (1.0f + std::abs(whole->grads()[i]))) << t.name;
      } else {
        ASSERT_EQ(got, whole->grads()[i]) << t.name << " [" << i - t.offset << "]";
      }
    }
  }
}

TEST(PipelineStages, MatchTheWholeModelUntied) { expect_stages_match_whole_model(false); }
// Tied: the table's gradient is summed in another order (embedding and classifier parts per
// micro-batch in turn on one process, per stage here), so within float rounding.
TEST(PipelineStages, MatchTheWholeModelTied) { expect_stages_match_whole_model(true); }

}  // namespace
}  // namespace koi::train
