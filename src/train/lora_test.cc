#include "train/lora.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <boost/json.hpp>
#include <cmath>

#include "base/check.h"
#include "base/file.h"
#include "base/random.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {
namespace {

constexpr int kB = 2, kT = 6;

model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.dim = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4, c.ffn_dim = 24, c.n_vocab = 30;
  c.max_seq_len = 8, c.rope_style = kernels::RopeStyle::kNeox;
  return c;
}

const std::vector<LoraTarget> kAllTargets = {LoraTarget::kQ,    LoraTarget::kK,  LoraTarget::kV,   LoraTarget::kO,
                                             LoraTarget::kGate, LoraTarget::kUp, LoraTarget::kDown};

struct Batch {
  std::vector<int32_t> in, tg;
};
Batch make_batch(int vocab) {
  Batch b;
  for (int i = 0; i < kB * kT; ++i) b.in.push_back((i * 7 + 3) % vocab), b.tg.push_back((i * 11 + 5) % vocab);
  return b;
}

const ParamTensor& find(const std::vector<ParamTensor>& layout, const std::string& name) {
  auto it = std::find_if(layout.begin(), layout.end(), [&](const ParamTensor& t) { return t.name == name; });
  KOI_CHECK(it != layout.end());
  return *it;
}

// A model with random base weights and adapters on `targets` whose B is random too (a new
// adapter has B = 0, which would hide errors in every gradient but dB).
LlamaTrain adapted_model(ThreadPool* pool, const std::vector<LoraTarget>& targets) {
  LlamaTrain m = LlamaTrain::create(tiny_config(), pool).value();
  m.init_random(7);
  KOI_CHECK(m.add_lora({.rank = 3, .alpha = 6.0f, .targets = targets}, 11).ok());
  Rng rng(5);
  for (const ParamTensor& t : m.lora()->layout()) {
    if (!t.name.ends_with("lora_B.weight")) continue;
    for (int64_t i = 0; i < t.size; ++i) m.lora()->params()[t.offset + i] = 0.2f * (rng.uniform_f() - 0.5f);
  }
  return m;
}

// The same model with the adapters merged into the weights (and no adapters).
LlamaTrain merged_model(ThreadPool* pool, const LlamaTrain& adapted) {
  LlamaTrain m = LlamaTrain::create(tiny_config(), pool).value();
  m.params() = adapted.params();
  adapted.lora()->merge_into(&m.params(), m.layout());
  return m;
}

TEST(LoraTarget, ShortAndPeftNames) {
  EXPECT_EQ(*lora_target_from_name("q"), LoraTarget::kQ);
  EXPECT_EQ(*lora_target_from_name("down_proj"), LoraTarget::kDown);
  EXPECT_STREQ(lora_module_name(LoraTarget::kGate), "gate_proj");
  EXPECT_EQ(lora_target_from_name("qkv").status().message(),
            "unknown LoRA target 'qkv' (known: q, k, v, o, gate, up, down, or the same with _proj)");
}

TEST(LoraAdapters, LayoutHasPeftNamesAndShapes) {
  auto a = LoraAdapters::create(tiny_config(), {.rank = 4, .targets = {LoraTarget::kV, LoraTarget::kQ}});
  ASSERT_TRUE(a.ok());
  const std::vector<ParamTensor>& l = a->layout();
  ASSERT_EQ(l.size(), 2u * 2 * 2);  // layers x targets x (A, B)
  EXPECT_EQ(l[0].name, "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  EXPECT_EQ(l[0].shape, (std::vector<int64_t>{4, 16}));  // (r, in)
  EXPECT_EQ(l[3].name, "base_model.model.model.layers.0.self_attn.v_proj.lora_B.weight");
  EXPECT_EQ(l[3].shape, (std::vector<int64_t>{8, 4}));  // (out = kv_dim, r)
  EXPECT_EQ(l.back().offset + l.back().size, static_cast<int64_t>(a->params().size()));
  EXPECT_FLOAT_EQ(a->config().scale(), 1.0f);  // alpha defaults to the rank
  EXPECT_EQ(LoraAdapters::create(tiny_config(), {.rank = 0}).status().message(), "the LoRA rank must be at least 1");
}

TEST(LoraAdapters, NewAdapterLeavesTheModelUnchanged) {
  ThreadPool pool(2);
  LlamaTrain base = LlamaTrain::create(tiny_config(), &pool).value();
  base.init_random(7);
  LlamaTrain adapted = LlamaTrain::create(tiny_config(), &pool).value();
  adapted.init_random(7);
  ASSERT_TRUE(adapted.add_lora({.rank = 2, .targets = kAllTargets}, 1).ok());
  const Batch b = make_batch(30);
  EXPECT_EQ(base.forward(b.in.data(), b.tg.data(), kB, kT), adapted.forward(b.in.data(), b.tg.data(), kB, kT));
}

// The merged model (W + alpha/r B A) and the base model with its adapters give the same
// logits: compared as log-probabilities (logits up to a per-row constant), max |difference|
// over max |value|.
TEST(LoraAdapters, MergedModelGivesTheSameLogits) {
  ThreadPool pool(2);
  LlamaTrain adapted = adapted_model(&pool, kAllTargets);
  LlamaTrain merged = merged_model(&pool, adapted);
  const Batch b = make_batch(30);
  adapted.forward(b.in.data(), b.tg.data(), kB, kT);
  merged.forward(b.in.data(), b.tg.data(), kB, kT);
  double max_diff = 0.0, max_abs = 0.0;
  for (int i = 0; i < kB * kT * 30; ++i) {
    const double a = std::log(adapted.probs()[i]), m = std::log(merged.probs()[i]);
    max_diff = std::max(max_diff, std::abs(a - m));
    max_abs = std::max(max_abs, std::abs(m));
  }
  EXPECT_LE(max_diff / max_abs, 1e-5);
}

// Oracle: with W' = W + s B A and G = dL/dW' (the full backward pass, itself checked
// against PyTorch in tests/train_reference_test.cc), the chain rule gives
// dL/dB = s G A^T and dL/dA = s B^T G. Every adapter of every layer is checked, so the
// gradient that flows back through the adapters into earlier layers is checked too.
TEST(LoraAdapters, GradientsMatchTheChainRuleThroughTheMergedWeights) {
  ThreadPool pool(2);
  LlamaTrain adapted = adapted_model(&pool, kAllTargets);
  LlamaTrain merged = merged_model(&pool, adapted);
  const Batch b = make_batch(30);
  const float scale = 1.0f / static_cast<float>(kB * kT);
  adapted.zero_grad();
  const float loss_adapted = adapted.forward(b.in.data(), b.tg.data(), kB, kT);
  adapted.backward(scale);
  merged.zero_grad();
  const float loss_merged = merged.forward(b.in.data(), b.tg.data(), kB, kT);
  merged.backward(scale);
  EXPECT_NEAR(loss_adapted, loss_merged, 1e-6f * loss_merged);

  const LoraAdapters& lora = *adapted.lora();
  const float s = lora.config().scale();
  const int64_t r = lora.config().rank;
  int checked = 0;
  for (size_t i = 0; i < lora.layout().size(); i += 2) {
    const ParamTensor& ta = lora.layout()[i];
    const ParamTensor& tb = lora.layout()[i + 1];
    const std::string module = ta.name.substr(std::string("base_model.model.").size(),
                                              ta.name.size() - std::string("base_model.model.").size() -
                                                  std::string(".lora_A.weight").size());
    const ParamTensor& tw = find(merged.layout(), module + ".weight");
    const int64_t out = tw.shape[0], in = tw.shape[1];
    const float* G = merged.grads().data() + tw.offset;
    const float* A = lora.params().data() + ta.offset;
    const float* B = lora.params().data() + tb.offset;
    std::vector<double> want_a(static_cast<size_t>(r * in), 0.0), want_b(static_cast<size_t>(out * r), 0.0);
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t k = 0; k < r; ++k) {
        for (int64_t j = 0; j < in; ++j) {
          want_b[o * r + k] += s * double{G[o * in + j]} * A[k * in + j];
          want_a[k * in + j] += s * double{B[o * r + k]} * G[o * in + j];
        }
      }
    }
    auto check = [&](const std::vector<double>& want, const float* got, const std::string& name) {
      double max_want = 0.0, max_diff = 0.0;
      for (size_t j = 0; j < want.size(); ++j) {
        max_want = std::max(max_want, std::abs(want[j]));
        max_diff = std::max(max_diff, std::abs(want[j] - got[j]));
      }
      EXPECT_GT(max_want, 0.0) << name;
      EXPECT_LE(max_diff, 1e-4 * max_want) << name;
      ++checked;
    };
    check(want_a, adapted.trainable_grads().data() + ta.offset, ta.name);
    check(want_b, adapted.trainable_grads().data() + tb.offset, tb.name);
  }
  EXPECT_EQ(checked, 2 * 2 * 7);
}

TEST(LoraAdapters, TrainingChangesOnlyTheAdapters) {
  ThreadPool pool(2);
  LlamaTrain m = LlamaTrain::create(tiny_config(), &pool).value();
  m.init_random(7);
  ASSERT_TRUE(m.add_lora({.rank = 4, .alpha = 8.0f}, 3).ok());
  const std::vector<float> base = m.params();
  EXPECT_TRUE(m.grads().empty());  // the base gradient buffer is released
  AdamW opt({}, static_cast<int64_t>(m.trainable_params().size()));
  const Batch b = make_batch(30);
  float first = 0.0f, last = 0.0f;
  for (int step = 0; step < 30; ++step) {
    m.zero_grad();
    last = m.forward(b.in.data(), b.tg.data(), kB, kT);
    if (step == 0) first = last;
    m.backward(1.0f / (kB * kT));
    opt.step(m.trainable_params(), m.trainable_grads(), m.trainable_layout(), 1e-2f);
  }
  EXPECT_LT(last, first - 0.05f);
  EXPECT_EQ(m.params(), base);
}

class LoraFilesTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-lora"); }
  void TearDown() override { remove_all(dir_); }
  std::string dir_;
};

TEST_F(LoraFilesTest, SaveWritesPeftFilesThatLoadBack) {
  auto a = LoraAdapters::create(tiny_config(),
                                {.rank = 2, .alpha = 4.0f, .targets = {LoraTarget::kUp, LoraTarget::kQ}});
  ASSERT_TRUE(a.ok());
  a->init_random(9);
  a->params().back() = 0.5f;
  ASSERT_TRUE(a->save(dir_).ok());
  const boost::json::object config = boost::json::parse(*read_file(path_join(dir_, "adapter_config.json"))).as_object();
  EXPECT_EQ(config.at("peft_type").as_string(), "LORA");
  EXPECT_EQ(config.at("r").as_int64(), 2);
  EXPECT_EQ(config.at("lora_alpha").to_number<double>(), 4.0);
  EXPECT_EQ(boost::json::serialize(config.at("target_modules")), R"(["q_proj","up_proj"])");

  auto back = LoraAdapters::load(dir_, tiny_config());
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->params(), a->params());
  EXPECT_EQ(back->layout().size(), a->layout().size());

  model::ModelConfig wider = tiny_config();
  wider.dim = 32, wider.head_dim = 8;
  EXPECT_EQ(LoraAdapters::load(dir_, wider).status().message(),
            path_join(dir_, "adapter_model.safetensors") +
                ": tensor base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight is not f32 of 64 values; the "
                "checkpoint does not match the model config");
  ASSERT_TRUE(write_file_atomic(path_join(dir_, "adapter_config.json"), R"({"peft_type":"IA3"})").ok());
  EXPECT_EQ(LoraAdapters::load(dir_, tiny_config()).status().message(),
            path_join(dir_, "adapter_config.json") + ": peft_type is not LORA; only LoRA adapters are supported");
}

}  // namespace
}  // namespace koi::train
