#include "train/finetune.h"

#include <gtest/gtest.h>

#include <cmath>

#include "base/check.h"
#include "base/file.h"
#include "model/gguf_export.h"
#include "model/llama.h"
#include "model/loader.h"
#include "model/random_model.h"
#include "tokenizer/load.h"
#include "train/checkpoint.h"
#include "train/data.h"
#include "train/export.h"
#include "train/trainer.h"

namespace koi::train {
namespace {

constexpr int kT = 8;

// A GGUF-style model: arch llama, Q/K rows in the interleaved rope layout.
model::ModelConfig gguf_config(int n_vocab) {
  model::ModelConfig c;
  c.arch = "llama";
  c.dim = 16, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.head_dim = 4, c.ffn_dim = 24, c.n_vocab = n_vocab;
  c.max_seq_len = 16, c.rope_style = kernels::RopeStyle::kInterleaved;
  return c;
}

std::vector<int32_t> tokens(int n, int vocab, int mul) {
  std::vector<int32_t> out;
  for (int i = 0; i < n; ++i) out.push_back((i * mul + 3) % vocab);
  return out;
}

// Mean next-token loss of one sequence with the inference forward pass.
double inference_loss(const model::ModelConfig& c, model::ModelWeights w, const std::vector<int32_t>& in,
                      const std::vector<int32_t>& tg) {
  ThreadPool pool(1);
  model::LlamaModel inf(c, std::move(w));
  model::KvCache kv(inf.kv_shape(1, 16));
  std::vector<int32_t> blocks{0};
  model::ForwardBatch batch;
  batch.sequences.push_back({blocks});
  for (int t = 0; t < static_cast<int>(in.size()); ++t) {
    batch.token_ids.push_back(in[t]);
    batch.positions.push_back(t);
    batch.seq_index.push_back(0);
    batch.logit_indices.push_back(t);
  }
  std::vector<float> logits(in.size() * static_cast<size_t>(c.n_vocab));
  KOI_CHECK(inf.forward(batch, kv, logits.data(), &pool).ok());
  double loss = 0.0;
  for (size_t t = 0; t < in.size(); ++t) {
    const float* row = logits.data() + t * static_cast<size_t>(c.n_vocab);
    double sum = 0.0;
    for (int v = 0; v < c.n_vocab; ++v) sum += std::exp(double{row[v]});
    loss += std::log(sum) - row[tg[t]];
  }
  return loss / static_cast<double>(in.size());
}

TEST(LoadBaseWeights, InterleavedWeightsTrainAsTheSameModel) {
  const model::ModelConfig c = gguf_config(30);
  BaseModel base;
  base.config = c;
  base.config.rope_style = kernels::RopeStyle::kNeox;
  base.stored_rope = c.rope_style;
  base.weights = model::random_weights(c, 3);
  ThreadPool pool(2);
  LlamaTrain m = LlamaTrain::create(base.config, &pool).value();
  ASSERT_TRUE(load_base_weights(base, &m).ok());
  const std::vector<int32_t> in = tokens(kT, 30, 7), tg = tokens(kT, 30, 13);
  const float loss = m.forward(in.data(), tg.data(), 1, kT);
  EXPECT_NEAR(loss, inference_loss(c, model::random_weights(c, 3), in, tg), 1e-5);
}

// A mixture-of-experts model written as GGUF (experts stacked in 3-D, llama.cpp's names;
// Mixtral as "llama" with Q/K permuted, Qwen2-MoE as "qwen2moe" with its shared expert) comes
// back as the same training parameters, bit for bit, so training from GGUF computes the
// gradients that train_reference_test checks against PyTorch for the HF layout.
TEST(LoadBaseWeights, MoeGgufLoadsAsTheSameTrainingParameters) {
  for (bool qwen2 : {false, true}) {
    model::ModelConfig c = gguf_config(30);
    c.rope_style = kernels::RopeStyle::kNeox;
    c.moe = {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = c.ffn_dim};
    if (qwen2) {
      c.arch = "qwen2", c.qkv_bias = true;
      c.moe = {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = 8, .norm_topk_prob = false, .shared_ffn_dim = 12};
    }
    ThreadPool pool(2);
    LlamaTrain hf = LlamaTrain::create(c, &pool).value();
    ASSERT_TRUE(hf.load(model::random_weights(c, 5)).ok());
    model::GgufWriter writer;
    ASSERT_TRUE(model::add_model_to_gguf(c, hf.weights_view(), DType::kF32, writer).ok());
    const std::string text = "abcdefghijklmnopqrstuvwxyz0123";
    tokenizer::spec_to_gguf(CharVocab::from_text(text).to_spec(), writer);
    auto dir = make_temp_dir("koi-moe-gguf");
    ASSERT_TRUE(dir.ok());
    const std::string path = path_join(*dir, "moe.gguf");
    ASSERT_TRUE(writer.write(path).ok());
    auto base = load_base_model(path);
    ASSERT_TRUE(base.ok()) << base.status().message();
    EXPECT_EQ(base->config.moe.n_experts, 4);
    EXPECT_EQ(base->config.moe.shared_ffn_dim, c.moe.shared_ffn_dim);
    EXPECT_EQ(base->config.moe.norm_topk_prob, c.moe.norm_topk_prob);
    LlamaTrain gguf = LlamaTrain::create(base->config, &pool).value();
    ASSERT_TRUE(load_base_weights(*base, &gguf).ok());
    ASSERT_EQ(gguf.layout().size(), hf.layout().size());
    for (size_t i = 0; i < hf.layout().size(); ++i) EXPECT_EQ(gguf.layout()[i].name, hf.layout()[i].name);
    EXPECT_EQ(gguf.params(), hf.params()) << (qwen2 ? "qwen2moe" : "mixtral");
    remove_all(*dir);
  }
}

class FineTuneTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-finetune");
    text_ = "the cat sat on the mat. the dog sat on the log. ";
    for (int i = 0; i < 5; ++i) text_ += text_;
    ASSERT_TRUE(write_file_atomic(path_join(dir_, "corpus.txt"), text_).ok());
    vocab_ = CharVocab::from_text(text_).to_spec();
    const model::ModelConfig c = gguf_config(CharVocab::from_text(text_).n_vocab());
    model::GgufWriter writer;
    ASSERT_TRUE(model::add_model_to_gguf(c, model::random_weights(c, 3), DType::kF32, writer).ok());
    tokenizer::spec_to_gguf(vocab_, writer);
    ASSERT_TRUE(writer.write(path_join(dir_, "base.gguf")).ok());
  }
  void TearDown() override { remove_all(dir_); }

  TrainConfig recipe(int lora_rank) const {
    TrainConfig tc;
    tc.init_from = path_join(dir_, "base.gguf");
    tc.text_paths = {path_join(dir_, "corpus.txt")};
    tc.out_dir = path_join(dir_, "run");
    tc.lora.rank = lora_rank;
    tc.batch_size = 2, tc.seq_len = kT, tc.steps = 6, tc.eval_iters = 1, tc.log_interval = 0, tc.threads = 1;
    tc.schedule.lr = 1e-2f, tc.schedule.decay_steps = 6;
    return tc;
  }

  std::string dir_, text_;
  tokenizer::TokenizerSpec vocab_;
};

TEST_F(FineTuneTest, LoadBaseModelReadsShapeWeightsAndTokenizer) {
  auto base = load_base_model(path_join(dir_, "base.gguf"));
  ASSERT_TRUE(base.ok()) << base.status().message();
  EXPECT_EQ(base->config.rope_style, kernels::RopeStyle::kNeox);
  EXPECT_EQ(base->stored_rope, kernels::RopeStyle::kInterleaved);
  EXPECT_EQ(base->config.dim, 16);
  EXPECT_EQ(base->tokenizer.tokens.size(), vocab_.tokens.size());
  auto missing = load_base_model(path_join(dir_, "none.gguf"));
  EXPECT_NE(missing.status().message().find(path_join(dir_, "none.gguf")), std::string::npos);
}

// A LoRA run on a GGUF model writes adapters (PEFT files), the model's tokenizer, and a
// checkpoint whose merged GGUF export computes what the base with its adapters computes.
TEST_F(FineTuneTest, LoraRunExportsAMergedModelEqualToBasePlusAdapters) {
  auto result = run_training(recipe(2), /*resume=*/false, nullptr);
  ASSERT_TRUE(result.ok()) << result.status().message();
  const std::string ckpt = result->checkpoint;
  for (const char* f : {"adapter_model.safetensors", "adapter_config.json", "tokenizer.gguf", "model.safetensors"}) {
    EXPECT_TRUE(file_exists(path_join(ckpt, f))) << f;
  }
  const std::string merged_path = path_join(dir_, "merged.gguf");
  ASSERT_TRUE(export_gguf(ckpt, merged_path, DType::kF32).ok());
  ASSERT_TRUE(export_adapter(ckpt, path_join(dir_, "adapter")).ok());
  EXPECT_TRUE(file_exists(path_join(dir_, "adapter/adapter_model.safetensors")));

  // Base + adapters from the checkpoint, in the training forward pass.
  ThreadPool pool(1);
  const model::ModelConfig config = read_checkpoint_config(ckpt).value();
  LlamaTrain adapted = LlamaTrain::create(config, &pool).value();
  ASSERT_TRUE(adapted.add_lora({.rank = 2}, 0).ok());
  AdamW unused({}, static_cast<int64_t>(adapted.trainable_params().size()));
  ASSERT_TRUE(load_checkpoint(ckpt, &adapted, &unused).ok());
  const std::vector<int32_t> in = tokens(kT, config.n_vocab, 5), tg = tokens(kT, config.n_vocab, 9);
  const float want = adapted.forward(in.data(), tg.data(), 1, kT);

  auto merged = model::load_weights(merged_path);
  ASSERT_TRUE(merged.ok()) << merged.status().message();
  EXPECT_NEAR(inference_loss(merged->config, std::move(merged->weights), in, tg), want, 1e-5);
  // The adapters were trained: the merged model is not the base.
  auto base = model::load_weights(path_join(dir_, "base.gguf"));
  EXPECT_GT(std::abs(inference_loss(base->config, std::move(base->weights), in, tg) - want), 1e-4);
  auto tok = tokenizer::load_tokenizer(merged_path);
  ASSERT_TRUE(tok.ok());
  EXPECT_EQ(tok->n_vocab(), static_cast<int32_t>(vocab_.tokens.size()));
}

// A fine-tuning run, full or LoRA, resumed from a checkpoint reaches the weights of an
// uninterrupted run bit for bit.
TEST_F(FineTuneTest, ResumedRunsAreBitIdentical) {
  for (int rank : {0, 2}) {
    TrainConfig whole = recipe(rank);
    whole.out_dir = path_join(dir_, "whole" + std::to_string(rank));
    auto a = run_training(whole, false, nullptr);
    ASSERT_TRUE(a.ok()) << a.status().message();
    TrainConfig half = recipe(rank);
    half.out_dir = path_join(dir_, "half" + std::to_string(rank));
    half.steps = 3;
    ASSERT_TRUE(run_training(half, false, nullptr).ok());
    half.steps = 6;
    auto b = run_training(half, true, nullptr);
    ASSERT_TRUE(b.ok()) << b.status().message();
    const char* trained = rank > 0 ? "adapter_model.safetensors" : "model.safetensors";
    EXPECT_EQ(*read_file(path_join(a->checkpoint, trained)), *read_file(path_join(b->checkpoint, trained))) << rank;
    EXPECT_EQ(*read_file(path_join(a->checkpoint, "optimizer.safetensors")),
              *read_file(path_join(b->checkpoint, "optimizer.safetensors")))
        << rank;
    EXPECT_EQ(file_exists(path_join(a->checkpoint, "adapter_config.json")), rank > 0);
  }
}

TEST_F(FineTuneTest, RunAndExportErrorsSayWhatToDo) {
  TrainConfig long_windows = recipe(2);
  long_windows.seq_len = 32;
  EXPECT_EQ(run_training(long_windows, false, nullptr).status().message(),
            "train.seq_len 32 exceeds the context of " + path_join(dir_, "base.gguf") + " (16 tokens)");
  auto full = run_training(recipe(0), false, nullptr);
  ASSERT_TRUE(full.ok()) << full.status().message();
  EXPECT_EQ(export_adapter(full->checkpoint, path_join(dir_, "adapter")).message(),
            full->checkpoint + ": no LoRA adapters (adapter_config.json); the run trained every weight, export it " +
                "with -o MODEL.gguf");
}

TEST_F(FineTuneTest, RecipeErrors) {
  auto shape =
      parse_train_config("model: {init_from: m.gguf, dim: 8}\ndata: {text: a.txt}\ntrain: {out: r}\n", "r.yaml");
  EXPECT_EQ(shape.status().message(),
            "r.yaml: model.init_from takes the shape from that model; remove the other model keys");
  auto lora = parse_train_config("model: {dim: 8, heads: 2}\ndata: {text: a.txt}\ntrain: {out: r, lora_rank: 4}\n",
                                 "r.yaml");
  EXPECT_EQ(lora.status().message(), "r.yaml: train.lora_rank needs model.init_from (the model to adapt)");
  auto chars = parse_train_config("model: {init_from: m.gguf}\ndata: {text: a.txt, tokenizer: char}\ntrain: {out: r}\n",
                                  "r.yaml");
  EXPECT_EQ(chars.status().message(),
            "r.yaml: data.tokenizer must be 'model' (the tokenizer of model.init_from) when fine-tuning");
  auto target = parse_train_config(
      "model: {init_from: m.gguf}\ndata: {text: a.txt}\ntrain: {out: r, lora_rank: 4, lora_targets: [q, qkv]}\n",
      "r.yaml");
  EXPECT_EQ(target.status().message(),
            "r.yaml: train.lora_targets: unknown LoRA target 'qkv' (known: q, k, v, o, gate, up, down, or the same "
            "with _proj)");
  auto ok = parse_train_config(
      "model: {init_from: m.gguf}\ndata: {text: a.txt}\ntrain: {out: r, lora_rank: 4, lora_alpha: 8, "
      "lora_targets: [q, v, down]}\n",
      "r.yaml");
  ASSERT_TRUE(ok.ok()) << ok.status().message();
  EXPECT_EQ(ok->init_from, "m.gguf");
  EXPECT_EQ(ok->seq_len, 0);  // the model's context
  EXPECT_EQ(ok->lora.targets, (std::vector<LoraTarget>{LoraTarget::kQ, LoraTarget::kV, LoraTarget::kDown}));
  EXPECT_FLOAT_EQ(ok->lora.scale(), 2.0f);
}

}  // namespace
}  // namespace koi::train
