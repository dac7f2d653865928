// LoraAdapter: PEFT files in, with their errors; and the forward pass with adapters: equal to
// the merged weights (W + scale B A) within float rounding, and batch invariant across a mix
// of adapters and the base.
#include "model/lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>

#include "base/file.h"
#include "base/random.h"
#include "model/llama.h"
#include "model/random_model.h"
#include "model/lora_testing.h"

namespace koi::model {
namespace {

ModelConfig tiny() {
  ModelConfig c = *named_shape("tiny");
  c.rope_style = kernels::RopeStyle::kNeox;
  c.max_seq_len = 64;
  return c;
}

class LoraAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-model-lora"); }
  void TearDown() override { remove_all(dir_); }
  std::string sub(const std::string& name) {
    const std::string d = path_join(dir_, name);
    std::filesystem::create_directories(d);
    return d;
  }
  std::string dir_;
};

TEST_F(LoraAdapterTest, LoadsPeftFiles) {
  const ModelConfig c = tiny();
  PeftAdapter p;
  p.fill(c, 1);
  const std::string d = sub("a");
  ASSERT_TRUE(p.write(d).ok());
  auto a = LoraAdapter::load(d, c);
  ASSERT_TRUE(a.ok()) << a.status().message();
  EXPECT_EQ(a->rank(), 4);
  EXPECT_FLOAT_EQ(a->config().scale(), 2.0f);
  EXPECT_EQ(a->matrices(0, LoraTarget::kK).rank, 0);
  const kernels::LoraMatrices v = a->matrices(1, LoraTarget::kV);
  ASSERT_EQ(v.rank, 4);
  // A as stored; B transposed: bt[k, o] = B[o, k].
  const std::vector<float>& b = p.tensors.at("base_model.model.model.layers.1.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(v.a[5], p.tensors.at("base_model.model.model.layers.1.self_attn.v_proj.lora_A.weight")[5]);
  EXPECT_EQ(v.bt[1 * c.kv_dim() + 7], b[7 * 4 + 1]);
  EXPECT_EQ(a->bytes(), int64_t{4} * 4 * c.n_layers * ((c.dim + c.q_dim()) + (c.dim + c.kv_dim()) +
                                                        (c.q_dim() + c.dim) + (c.ffn_dim + c.dim)));
}

TEST_F(LoraAdapterTest, ErrorsNameTheKeyOrTensor) {
  const ModelConfig c = tiny();
  PeftAdapter p;
  p.fill(c, 2);
  {
    PeftAdapter dora = p;
    dora.extra_config = ",\"use_dora\":true";
    const std::string d = sub("dora");
    ASSERT_TRUE(dora.write(d).ok());
    EXPECT_EQ(LoraAdapter::load(d, c).status().message(),
              path_join(d, kLoraConfigFile) + ": use_dora = true is not supported; Koi serves plain LoRA adapters");
  }
  {
    PeftAdapter missing = p;
    missing.tensors.erase("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight");
    const std::string d = sub("missing");
    ASSERT_TRUE(missing.write(d).ok());
    EXPECT_EQ(LoraAdapter::load(d, c).status().message(),
              path_join(d, kLoraWeightsFile) +
                  ": tensor base_model.model.model.layers.1.mlp.down_proj.lora_B.weight is missing");
  }
  {
    ModelConfig wider = c;
    wider.ffn_dim = 96;
    const std::string d = sub("shape");
    ASSERT_TRUE(p.write(d).ok());
    EXPECT_EQ(LoraAdapter::load(d, wider).status().message(),
              path_join(d, kLoraWeightsFile) +
                  ": tensor base_model.model.model.layers.0.mlp.down_proj.lora_A.weight has shape [128, 4], expected "
                  "[96, 4] (ggml order); the adapter does not belong to this model");
  }
  {
    PeftAdapter extra = p;
    extra.tensors["base_model.model.lm_head.lora_A.weight"] = std::vector<float>(4 * 8, 0.0f);
    const std::string d = sub("extra");
    ASSERT_TRUE(extra.write(d).ok());
    EXPECT_EQ(LoraAdapter::load(d, c).status().code(), StatusCode::kUnsupported);
  }
  {
    PeftAdapter regex = p;
    const std::string d = sub("regex");
    ASSERT_TRUE(regex.write(d).ok());
    ASSERT_TRUE(write_file_atomic(path_join(d, kLoraConfigFile),
                                  R"({"peft_type":"LORA","r":4,"lora_alpha":8,"target_modules":".*proj"})")
                    .ok());
    EXPECT_EQ(LoraAdapter::load(d, c).status().message(),
              path_join(d, kLoraConfigFile) +
                  ": target_modules must be a non-empty list of module names (q_proj, k_proj, ...); a regular "
                  "expression is not supported");
  }
}

// W += scale B A for every adapted projection: the merged model koi train export writes.
ModelWeights merged(const ModelConfig& c, const PeftAdapter& p, uint64_t seed) {
  ModelWeights w = random_weights(c, seed);
  const float scale = static_cast<float>(p.alpha / p.rank);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    LayerWeights& L = w.layers[static_cast<size_t>(layer)];
    for (const std::string& module : p.targets) {
      const LoraTarget t = *lora_target_from_name(module);
      TensorView* view = t == LoraTarget::kQ ? &L.wq : t == LoraTarget::kV ? &L.wv : t == LoraTarget::kO ? &L.wo
                                                                                                       : &L.w_down;
      const auto [in, out] = lora_projection_shape(c, t);
      const std::string name = "base_model.model." + lora_module_path(layer, t);
      const std::vector<float>& A = p.tensors.at(name + ".lora_A.weight");
      const std::vector<float>& B = p.tensors.at(name + ".lora_B.weight");
      std::vector<float> W(view->f32(), view->f32() + in * out);
      for (int64_t o = 0; o < out; ++o) {
        for (int64_t i = 0; i < in; ++i) {
          float ba = 0;
          for (int k = 0; k < p.rank; ++k) ba += B[static_cast<size_t>(o * p.rank + k)] * A[static_cast<size_t>(k * in + i)];
          W[static_cast<size_t>(o * in + i)] += scale * ba;
        }
      }
      view->data = w.own(std::move(W));
    }
  }
  return w;
}

// Logits of the last token of each prompt, one sequence per prompt, all in one batch.
std::vector<float> last_logits(LlamaModel& m, const std::vector<std::vector<int32_t>>& prompts,
                               const std::vector<const LoraAdapter*>& adapters) {
  KvCache kv(m.kv_shape(64));
  ForwardBatch batch;
  std::vector<std::vector<int32_t>> tables;
  for (size_t s = 0; s < prompts.size(); ++s) tables.push_back({static_cast<int32_t>(2 * s), static_cast<int32_t>(2 * s + 1)});
  for (size_t s = 0; s < prompts.size(); ++s) {
    batch.sequences.push_back({tables[s], adapters[s]});
    for (size_t i = 0; i < prompts[s].size(); ++i) {
      batch.token_ids.push_back(prompts[s][i]);
      batch.positions.push_back(static_cast<int32_t>(i));
      batch.seq_index.push_back(static_cast<int32_t>(s));
    }
    batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()) - 1);
  }
  std::vector<float> logits(prompts.size() * static_cast<size_t>(m.config().n_vocab));
  ThreadPool pool(2);
  EXPECT_TRUE(m.forward(batch, kv, logits.data(), &pool).ok());
  return logits;
}

TEST_F(LoraAdapterTest, ForwardMatchesMergedWeightsAndIsBatchInvariant) {
  const ModelConfig c = tiny();
  PeftAdapter p1, p2;
  p1.fill(c, 11);
  p2.rank = 8;
  p2.alpha = 4;
  p2.targets = {"q_proj", "v_proj", "o_proj", "down_proj"};
  p2.fill(c, 12);
  const std::string d1 = sub("one"), d2 = sub("two");
  ASSERT_TRUE(p1.write(d1).ok());
  ASSERT_TRUE(p2.write(d2).ok());
  auto a1 = LoraAdapter::load(d1, c);
  auto a2 = LoraAdapter::load(d2, c);
  ASSERT_TRUE(a1.ok() && a2.ok());
  LlamaModel base(c, random_weights(c, 5));
  LlamaModel merged1(c, merged(c, p1, 5)), merged2(c, merged(c, p2, 5));
  const std::vector<std::vector<int32_t>> prompts = {{1, 7, 9, 30, 2}, {1, 5, 5, 6, 100, 200, 3, 4}, {1, 44, 3}};
  const int64_t V = c.n_vocab;
  // Mixed: adapter 1, the base, adapter 2, in one batch.
  const std::vector<float> mixed = last_logits(base, prompts, {&*a1, nullptr, &*a2});
  const std::vector<float> ref1 = last_logits(merged1, {prompts[0]}, {nullptr});
  const std::vector<float> ref0 = last_logits(base, {prompts[1]}, {nullptr});
  const std::vector<float> ref2 = last_logits(merged2, {prompts[2]}, {nullptr});
  const std::vector<float>* refs[] = {&ref1, &ref0, &ref2};
  for (size_t s = 0; s < 3; ++s) {
    double err = 0, norm = 0;
    for (int64_t v = 0; v < V; ++v) {
      const double d = mixed[s * V + v] - (*refs[s])[v];
      err += d * d;
      norm += (*refs[s])[v] * (*refs[s])[v];
    }
    EXPECT_LT(std::sqrt(err / norm), 1e-5) << "sequence " << s;  // float rounding of (W + sBA) x vs W x + s B (A x)
  }
  // Batch invariance: each sequence alone with its adapter gives bitwise the same logits.
  const std::vector<float> alone1 = last_logits(base, {prompts[0]}, {&*a1});
  const std::vector<float> alone2 = last_logits(base, {prompts[2]}, {&*a2});
  EXPECT_TRUE(std::equal(alone1.begin(), alone1.end(), mixed.begin()));
  EXPECT_TRUE(std::equal(ref0.begin(), ref0.end(), mixed.begin() + V));
  EXPECT_TRUE(std::equal(alone2.begin(), alone2.end(), mixed.begin() + 2 * V));
}

}  // namespace
}  // namespace koi::model
