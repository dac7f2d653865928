// The trainer against PyTorch (llm.c's test_gpt2): for tiny random models, the loss and the
// gradient of every parameter match autograd in float64 within 1e-4 relative, and 10
// training steps (clipping, warmup + cosine, AdamW with weight decay) reproduce PyTorch's
// losses. The oracle is tests/reference/train_reference.py (Debian's python3-torch). The
// LoRA case freezes the base and checks the adapters' gradients and steps instead, against
// PEFT's formula x W^T + alpha/r (x A^T) B^T written out in PyTorch. The mixture-of-experts
// cases (Mixtral, Qwen2-MoE with a shared expert) include the router's load-balancing loss, so
// every router gradient carries both the routing weights' and the aux loss's terms.
#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>
#include <cstdlib>

#include "base/file.h"
#include "base/random.h"
#include "model/random_model.h"
#include "model/safetensors.h"
#include "train/checkpoint.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {
namespace {

struct Case {
  const char* name;
  int dim, layers, heads, kv_heads, ffn, vocab;
  bool tied, bias;
  kernels::RopeStyle rope;
  int lora_rank = 0;  // > 0: train adapters of that rank on every projection, alpha = 2 * rank
  model::MoeConfig moe = {};  // experts (bias: Qwen2-MoE names, else Mixtral's)
  float aux_coef = 0.0f;      // the load-balancing loss's weight
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.name; }

class TrainReferenceTest : public ::testing::TestWithParam<Case> {};

TEST_P(TrainReferenceTest, LossGradientsAndAdamWStepsMatchPyTorch) {
  const Case& k = GetParam();
  model::ModelConfig c;
  c.dim = k.dim, c.n_layers = k.layers, c.n_heads = k.heads, c.n_kv_heads = k.kv_heads, c.ffn_dim = k.ffn;
  c.n_vocab = k.vocab, c.head_dim = k.dim / k.heads, c.max_seq_len = 16, c.tied_embeddings = k.tied;
  c.qkv_bias = k.bias, c.rope_style = k.rope, c.rope_theta = 10000.0f, c.norm_eps = 1e-5f;
  c.moe = k.moe;
  if (k.moe.enabled() && k.bias) c.arch = "qwen2";
  ThreadPool pool(2);
  auto m = LlamaTrain::create(c, &pool);
  ASSERT_TRUE(m.ok()) << m.status().message();
  // random_weights has norms near 1 and larger matrices than init_random: bigger gradients.
  ASSERT_TRUE(m->load(model::random_weights(c, 7)).ok());
  m->set_moe_aux_loss_coef(k.aux_coef);
  if (k.lora_rank > 0) {
    const LoraConfig lora{.rank = k.lora_rank, .alpha = 2.0f * k.lora_rank,
                          .targets = {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO,
                                      LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown}};
    ASSERT_TRUE(m->add_lora(lora, 3).ok());
    Rng rng(9);  // B = 0 at initialisation would leave dA = 0: start from a random B
    for (const ParamTensor& t : m->trainable_layout()) {
      if (!t.name.ends_with("lora_B.weight")) continue;
      for (int64_t i = 0; i < t.size; ++i) m->trainable_params()[t.offset + i] = 0.5f * (rng.uniform_f() - 0.5f);
    }
  }

  const int B = 2, T = 9;
  std::vector<int32_t> inputs(B * T), targets(B * T);
  for (int i = 0; i < B * T; ++i) inputs[i] = (i * 37 + 11) % k.vocab, targets[i] = (i * 53 + 5) % k.vocab;
  const LrSchedule sched{.lr = 3e-3f, .min_lr = 3e-4f, .warmup_steps = 2, .decay_steps = 8};
  const AdamWConfig adam{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  const float clip = 1.0f;
  const int steps = 10;

  auto dir = make_temp_dir("koi-train-ref");
  ASSERT_TRUE(dir.ok());
  ASSERT_TRUE(write_params(path_join(*dir, "init.safetensors"), m->layout(), m->params()).ok());
  if (m->lora() != nullptr) {
    ASSERT_TRUE(m->lora()->save(*dir).ok());
  }
  namespace json = boost::json;
  json::object mc{{"dim", c.dim}, {"n_layers", c.n_layers}, {"n_heads", c.n_heads}, {"n_kv_heads", c.n_kv_heads},
                  {"norm_eps", c.norm_eps}, {"rope_theta", c.rope_theta}, {"tied_embeddings", c.tied_embeddings},
                  {"rope_style", k.rope == kernels::RopeStyle::kNeox ? "neox" : "interleaved"}};
  if (k.moe.enabled()) {
    mc["moe"] = {{"family", k.bias ? "qwen2_moe" : "mixtral"}, {"experts", k.moe.n_experts},
                 {"experts_per_token", k.moe.n_experts_used}, {"expert_ffn", k.moe.expert_ffn_dim},
                 {"shared_ffn", k.moe.shared_ffn_dim}, {"norm_topk_prob", k.moe.norm_topk_prob},
                 {"aux_coef", k.aux_coef}};
  }
  json::object oc{{"lr", sched.lr}, {"min_lr", sched.min_lr}, {"warmup_steps", sched.warmup_steps},
                  {"decay_steps", sched.decay_steps}, {"beta1", adam.beta1}, {"beta2", adam.beta2},
                  {"eps", adam.eps}, {"weight_decay", adam.weight_decay}, {"grad_clip", clip}, {"steps", steps}};
  json::array in_rows, tg_rows;
  for (int b = 0; b < B; ++b) {
    in_rows.emplace_back(json::value_from(std::vector<int32_t>(inputs.begin() + b * T, inputs.begin() + (b + 1) * T)));
    tg_rows.emplace_back(json::value_from(std::vector<int32_t>(targets.begin() + b * T, targets.begin() + (b + 1) * T)));
  }
  json::object cs{{"model", mc}, {"optim", oc}, {"inputs", in_rows}, {"targets", tg_rows}};
  if (m->lora() != nullptr) cs["lora"] = {{"rank", k.lora_rank}, {"alpha", m->lora()->config().alpha}};
  ASSERT_TRUE(write_file_atomic(path_join(*dir, "case.json"), json::serialize(cs)).ok());
  const std::string cmd = "/usr/bin/python3 " KOI_SOURCE_DIR "/tests/reference/train_reference.py " + *dir;
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  auto ref = model::SafetensorsFile::open(path_join(*dir, "reference.safetensors"));
  ASSERT_TRUE(ref.ok()) << ref.status().message();

  // Step 0: loss and every gradient.
  m->zero_grad();
  const float loss = m->forward(inputs.data(), targets.data(), B, T) + m->aux_loss();
  m->backward(1.0f / (B * T));
  const float ref_loss = ref->find("loss")->view.f32()[0];
  EXPECT_NEAR(loss, ref_loss, 1e-5 * std::fabs(ref_loss));
  for (const ParamTensor& t : m->trainable_layout()) {
    const model::SafetensorsTensor* g = ref->find("grad." + t.name);
    ASSERT_NE(g, nullptr) << t.name;
    ASSERT_EQ(g->view.num_elements(), t.size) << t.name;
    double max_ref = 0.0, max_diff = 0.0;
    for (int64_t i = 0; i < t.size; ++i) {
      max_ref = std::max(max_ref, std::fabs(double{g->view.f32()[i]}));
      max_diff = std::max(max_diff, std::fabs(double{g->view.f32()[i]} - m->trainable_grads()[t.offset + i]));
    }
    EXPECT_GT(max_ref, 0.0) << t.name;
    EXPECT_LE(max_diff, 1e-4 * max_ref) << t.name << ": max |grad - torch| " << max_diff << ", max |torch| " << max_ref;
  }

  // Ten training steps on the same batch.
  AdamW opt(adam, static_cast<int64_t>(m->trainable_params().size()));
  const float* ref_losses = ref->find("losses")->view.f32();
  for (int step = 0; step < steps; ++step) {
    m->zero_grad();
    const float l = m->forward(inputs.data(), targets.data(), B, T) + m->aux_loss();
    m->backward(1.0f / (B * T));
    clip_grad_norm(m->trainable_grads(), clip);
    opt.step(m->trainable_params(), m->trainable_grads(), m->trainable_layout(), lr_at(sched, step));
    EXPECT_NEAR(l, ref_losses[step], 1e-4 * std::fabs(ref_losses[step])) << "step " << step;
  }
  EXPECT_LT(ref_losses[steps - 1], ref_losses[0] - 0.1f);  // the steps do train
  remove_all(*dir);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, TrainReferenceTest,
    ::testing::Values(Case{"gqa_untied", 32, 2, 4, 2, 48, 40, false, false, kernels::RopeStyle::kNeox},
                      Case{"mha_tied_bias", 32, 2, 4, 4, 64, 48, true, true, kernels::RopeStyle::kNeox},
                      Case{"mqa_interleaved_bias", 24, 1, 3, 1, 40, 36, false, true, kernels::RopeStyle::kInterleaved},
                      Case{"gqa_bias_lora", 32, 2, 4, 2, 48, 40, false, true, kernels::RopeStyle::kNeox, 3},
                      // Mixtral: top-2 of 4 experts, renormalised; Qwen2-MoE: top-2 of 4, not
                      // renormalised, a shared expert and its gate. Both with the aux loss.
                      Case{"mixtral_moe", 32, 2, 4, 2, 24, 40, false, false, kernels::RopeStyle::kNeox, 0,
                           {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = 24}, 0.1f},
                      Case{"qwen2_moe_shared", 32, 2, 4, 2, 40, 40, false, true, kernels::RopeStyle::kNeox, 0,
                           {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = 16, .norm_topk_prob = false,
                            .shared_ffn_dim = 24},
                           0.1f}),
    [](const auto& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace koi::train
