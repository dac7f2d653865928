// The forward pass against an independent oracle: tiny random Llama-family models (Llama,
// Llama 3 rope scaling, Mistral with and without its sliding window, Qwen2, Qwen3 with
// per-head Q/K norms, Gemma 2 with GeGLU, post-norms, soft-caps and sliding-window layers,
// Gemma 3 with Q/K norms, a layer pattern and local/global rope, Phi-3 with fused tensors,
// a window and LongRoPE; the mixture-of-experts Mixtral, Qwen2-MoE with a shared expert and
// Qwen3-MoE) in Hugging Face format, made by tests/reference/tiny_models.py with
// Debian's PyTorch, whose float64 logits are the reference. Koi must match them within 1e-4 relative error
// (max |koi - ref| / max |ref| over each prompt's logits), loading the HF directory directly
// and after conversion to GGUF at f32; q8_0 and q4_0 GGUF conversions must stay within the
// tolerances stated below. Windows are 5 or 6 positions, the longest prompt 35, so the sliding
// layers are checked far past their window. Last, the engine serves each new architecture:
// greedy tokens through the engine equal the model's own argmax path.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include "base/file.h"
#include "engine/engine.h"
#include "engine/engine_test_util.h"
#include "engine/llama_runner.h"
#include "model/gguf.h"
#include "model/gguf_export.h"
#include "model/llama.h"
#include "model/loader.h"

namespace koi::model {
namespace {

// f32 weights: max |koi - ref| / max |ref| per prompt below 1e-4.
constexpr double kF32Tolerance = 1e-4;
// bf16 weights read directly: on CPUs with AVX512-BF16 the kernel rounds activations to
// bf16 too (8 significant bits, relative rounding error <= 2^-9 ~ 2e-3 per value, as
// llama.cpp does), so the bound is 1e-2 of the largest logit.
constexpr double kBf16Tolerance = 1e-2;
// Quantized weights are judged by the relative RMS error of the logits (rms(koi - ref) /
// rms(ref), the NMSE-style metric of ggml's test-backend-ops) since every logit moves a
// little. Per weight, q8_0 adds noise of ~0.6% of its RMS and q4_0 ~9% (16 times coarser
// steps); these random models have sharp attention (large q.k), which amplifies that noise
// several-fold by the logits (measured 1.6-4.8% for q8_0 and 20-53% for q4_0, the 11x
// ratio of the step sizes). The bounds leave ~25% headroom over the worst model; that the
// kernels compute exactly over the quantized weights is checked in kernels/matmul_test.cc.
constexpr double kQ8RmsTolerance = 6e-2;
constexpr double kQ4RmsTolerance = 6.5e-1;

class ModelReferenceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    auto dir = make_temp_dir("koi-model-ref");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
    std::string cmd = std::string("/usr/bin/python3 ") + KOI_SOURCE_DIR + "/tests/reference/tiny_models.py " + dir_ +
                      " > " + dir_ + "/python.log 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << "reference generator failed; see " << dir_ << "/python.log";
  }
  static void TearDownTestSuite() { remove_all(dir_); }

  struct Reference {
    std::vector<std::vector<int32_t>> prompts;
    std::vector<std::vector<double>> logits;  // per prompt [len, vocab]
  };

  static Reference load_reference(const std::string& model_dir) {
    Reference ref;
    auto text = read_file(path_join(model_dir, "prompts.json"));
    EXPECT_TRUE(text.ok());
    const boost::json::value prompts = boost::json::parse(*text);
    for (const auto& p : prompts.as_array()) {
      std::vector<int32_t> ids;
      for (const auto& v : p.as_array()) ids.push_back(static_cast<int32_t>(v.as_int64()));
      ref.prompts.push_back(ids);
    }
    for (size_t i = 0; i < ref.prompts.size(); ++i) {
      auto bytes = read_file(path_join(model_dir, "logits_" + std::to_string(i) + ".f64"));
      EXPECT_TRUE(bytes.ok());
      std::vector<double> l(bytes->size() / sizeof(double));
      std::memcpy(l.data(), bytes->data(), bytes->size());
      ref.logits.push_back(std::move(l));
    }
    return ref;
  }

  struct Error {
    double max_rel = 0;  // max |koi - ref| / max |ref|, worst prompt
    double rms_rel = 0;  // rms(koi - ref) / rms(ref), worst prompt
  };

  // Runs every prompt in ONE batch (several sequences, paged KV, logits for all positions)
  // and returns the worst relative errors over the prompts.
  static Error worst_error(LoadedWeights loaded, const Reference& ref) {
    LlamaModel model(loaded.config, std::move(loaded.weights));
    const int vocab = model.config().n_vocab;
    const int block_size = 4;  // small blocks: every prompt spans several, non-contiguous ones
    KvCache kv(model.kv_shape(64, block_size));
    ForwardBatch batch;
    std::vector<std::vector<int32_t>> tables(ref.prompts.size());
    int next_block = 63;  // hand out blocks from the top, so tables are not the identity
    for (size_t s = 0; s < ref.prompts.size(); ++s) {
      const auto& p = ref.prompts[s];
      for (size_t b = 0; b < (p.size() + block_size - 1) / block_size; ++b) tables[s].push_back(next_block--);
      batch.sequences.push_back({tables[s]});
      for (size_t i = 0; i < p.size(); ++i) {
        batch.logit_indices.push_back(static_cast<int32_t>(batch.token_ids.size()));
        batch.token_ids.push_back(p[i]);
        batch.positions.push_back(static_cast<int32_t>(i));
        batch.seq_index.push_back(static_cast<int32_t>(s));
      }
    }
    std::vector<float> logits(batch.logit_indices.size() * vocab);
    ThreadPool pool(2);
    Status st = model.forward(batch, kv, logits.data(), &pool);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return error_of(logits, ref, vocab);
  }

  // The same prompts one token per forward pass over a cache that keeps the sliding-window
  // layers apart (LlamaModel::kv_shape split_windows), whose window-table entries before each
  // token's window are -1, as the engine leaves the blocks it released: they must never be read.
  static Error worst_error_split_stepwise(LoadedWeights loaded, const Reference& ref) {
    LlamaModel model(loaded.config, std::move(loaded.weights));
    const int vocab = model.config().n_vocab, block_size = 4;
    KvCache kv(model.kv_shape(256, block_size, DType::kF32, /*split_windows=*/true));
    EXPECT_TRUE(kv.shape().split());
    ThreadPool pool(2);
    std::vector<float> logits;
    int next_block = 255;
    for (const auto& p : ref.prompts) {
      std::vector<int32_t> full, window;
      for (size_t i = 0; i < p.size(); ++i) {
        if (i % block_size == 0) {
          full.push_back(next_block--);
          window.push_back(next_block--);
        }
        const int first_read = std::max(0, static_cast<int>(i) - kv.shape().window + 1) / block_size;
        for (int b = 0; b < first_read; ++b) window[static_cast<size_t>(b)] = -1;
        ForwardBatch batch;
        batch.sequences.push_back({.block_table = full, .window_block_table = window});
        batch.token_ids.push_back(p[i]);
        batch.positions.push_back(static_cast<int32_t>(i));
        batch.seq_index.push_back(0);
        batch.logit_indices.push_back(0);
        logits.resize(logits.size() + static_cast<size_t>(vocab));
        Status st = model.forward(batch, kv, logits.data() + logits.size() - vocab, &pool);
        EXPECT_TRUE(st.ok()) << st.to_string();
      }
    }
    return error_of(logits, ref, vocab);
  }

  static Error error_of(const std::vector<float>& logits, const Reference& ref, int vocab) {
    Error worst;
    size_t row = 0;
    for (size_t s = 0; s < ref.prompts.size(); ++s) {
      double max_ref = 0, max_diff = 0, sq_ref = 0, sq_diff = 0;
      for (size_t i = 0; i < ref.prompts[s].size(); ++i, ++row) {
        for (int v = 0; v < vocab; ++v) {
          double r = ref.logits[s][i * vocab + v], d = r - logits[row * vocab + v];
          max_ref = std::max(max_ref, std::fabs(r));
          max_diff = std::max(max_diff, std::fabs(d));
          sq_ref += r * r;
          sq_diff += d * d;
        }
      }
      worst.max_rel = std::max(worst.max_rel, max_diff / max_ref);
      worst.rms_rel = std::max(worst.rms_rel, std::sqrt(sq_diff / sq_ref));
    }
    return worst;
  }

  // The prompts of `ref` at `indices` (LongRoPE's factor set depends on the context, so its
  // model is checked on the prompts each context can run).
  static Reference subset(const Reference& ref, std::initializer_list<size_t> indices) {
    Reference out;
    for (size_t i : indices) {
      out.prompts.push_back(ref.prompts[i]);
      out.logits.push_back(ref.logits[i]);
    }
    return out;
  }

  // Loads the HF directory `name`, applies `change` to its config and returns the worst error.
  static double error_with(const std::string& name, const Reference& ref, void (*change)(ModelConfig&)) {
    auto loaded = load_hf_weights(path_join(dir_, name));
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    if (!loaded.ok()) return 0;
    change(loaded->config);
    return worst_error(std::move(*loaded), ref).max_rel;
  }

  static std::string to_gguf(const std::string& model_dir, DType type) {
    auto loaded = load_hf_weights(model_dir);
    EXPECT_TRUE(loaded.ok()) << loaded.status().to_string();
    GgufWriter writer;
    auto stats = add_model_to_gguf(loaded->config, loaded->weights, type, writer);
    EXPECT_TRUE(stats.ok()) << stats.status().to_string();
    std::string path = model_dir + "." + std::string(dtype_name(type)) + ".gguf";
    Status st = writer.write(path);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return path;
  }

  static std::string dir_;
};

std::string ModelReferenceTest::dir_;

class PerModel : public ModelReferenceTest, public ::testing::WithParamInterface<const char*> {};

TEST_P(PerModel, HuggingFaceDirectoryMatchesPyTorch) {
  std::string d = path_join(dir_, GetParam());
  auto loaded = load_hf_weights(d);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const bool bf16 = loaded->weights.token_embd.type == DType::kBF16;
  Error err = worst_error(std::move(*loaded), load_reference(d));
  EXPECT_LT(err.max_rel, bf16 ? kBf16Tolerance : kF32Tolerance);
  std::printf("%s hf: max relative error %.3g\n", GetParam(), err.max_rel);
}

TEST_P(PerModel, GgufAtEachTypeMatchesPyTorch) {
  std::string d = path_join(dir_, GetParam());
  Reference ref = load_reference(d);
  for (DType type : {DType::kF32, DType::kQ8_0, DType::kQ4_0}) {
    std::string path = to_gguf(d, type);
    auto loaded = load_gguf_weights(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    Error err = worst_error(std::move(*loaded), ref);
    if (type == DType::kF32) {
      EXPECT_LT(err.max_rel, kF32Tolerance);
    } else {
      EXPECT_LT(err.rms_rel, type == DType::kQ8_0 ? kQ8RmsTolerance : kQ4RmsTolerance);
    }
    std::printf("%s gguf %s: max relative error %.3g, rms relative error %.3g\n", GetParam(),
                std::string(dtype_name(type)).c_str(), err.max_rel, err.rms_rel);
  }
}

// The same through the command line: `koi convert --hf DIR --type f32` (weights and
// tokenizer), then the GGUF it wrote is loaded and run.
TEST_P(PerModel, KoiConvertGgufMatchesPyTorch) {
  const std::string d = path_join(dir_, GetParam()), out = d + ".koi-convert.gguf";
  const std::string cmd = std::string(KOI_BINARY_DIR) + "/koi convert --hf " + d + " --type f32 -o " + out + " > " + d +
                          ".koi-convert.log 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << "koi convert failed; see " << d << ".koi-convert.log";
  auto loaded = load_gguf_weights(out);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  Error err = worst_error(std::move(*loaded), load_reference(d));
  EXPECT_LT(err.max_rel, kF32Tolerance);
  std::printf("%s koi convert f32: max relative error %.3g\n", GetParam(), err.max_rel);
}

INSTANTIATE_TEST_SUITE_P(TinyModels, PerModel,
                         ::testing::Values("llama_gqa", "qwen2_bias_tied", "llama3_scaled", "mistral_bf16",
                                           "qwen3_qknorm", "qwen3_tied", "gemma2_swa", "mistral_swa", "phi3_swa",
                                           "gemma3_swa", "gemma3_pattern6", "mixtral_moe", "qwen2_moe_shared",
                                           "qwen3_moe"));

// Each MoE routing feature changes these logits: the renormalisation (on for Mixtral and this
// Qwen3-MoE, off for this Qwen2-MoE), the number of experts per token and Qwen2-MoE's shared
// expert. Turning any one the other way puts Koi far outside the tolerance.
TEST_F(ModelReferenceTest, MoeRoutingFeaturesEachMatter) {
  const std::vector<std::tuple<const char*, const char*, void (*)(ModelConfig&)>> ablations = {
      {"mixtral_moe", "no renormalisation", [](ModelConfig& c) { c.moe.norm_topk_prob = false; }},
      {"mixtral_moe", "top-1", [](ModelConfig& c) { c.moe.n_experts_used = 1; }},
      {"qwen2_moe_shared", "renormalised", [](ModelConfig& c) { c.moe.norm_topk_prob = true; }},
      {"qwen2_moe_shared", "no shared expert", [](ModelConfig& c) { c.moe.shared_ffn_dim = 0; }},
      {"qwen3_moe", "top-2", [](ModelConfig& c) { c.moe.n_experts_used = 2; }},
  };
  for (const auto& [model, what, change] : ablations) {
    const std::string d = path_join(dir_, model);
    auto loaded = load_hf_weights(d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    change(loaded->config);
    const double err = worst_error(std::move(*loaded), load_reference(d)).max_rel;
    EXPECT_GT(err, 1e-2) << model << " with " << what;
    std::printf("%s with %s: max relative error %.3g\n", model, what, err);
  }
}

// The GGUF Koi writes for Qwen2-MoE is what llama.cpp reads: architecture qwen2moe, the expert
// keys, the router ffn_gate_inp [dim, experts] in f32, the experts stacked in 3-D
// ffn_{gate,up,down}_exps [in, out, experts], and the shared expert with its 1-D gate.
TEST_F(ModelReferenceTest, Qwen2MoeGgufUsesLlamaCppNames) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "qwen2_moe_shared"), DType::kQ8_0));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto arch = file->get_string("general.architecture");
  auto count = file->get_int("qwen2moe.expert_count");
  auto used = file->get_int("qwen2moe.expert_used_count");
  auto width = file->get_int("qwen2moe.expert_feed_forward_length");
  auto shared = file->get_int("qwen2moe.expert_shared_feed_forward_length");
  ASSERT_TRUE(arch.ok() && count.ok() && used.ok() && width.ok() && shared.ok());
  EXPECT_EQ(*arch, "qwen2moe");
  EXPECT_EQ(*count, 6);
  EXPECT_EQ(*used, 2);
  EXPECT_EQ(*width, 32);
  EXPECT_EQ(*shared, 40);
  const std::vector<std::tuple<const char*, DType, std::vector<int64_t>>> want = {
      {"blk.1.ffn_gate_inp.weight", DType::kF32, {64, 6}},
      {"blk.1.ffn_gate_exps.weight", DType::kQ8_0, {64, 32, 6}},
      {"blk.1.ffn_up_exps.weight", DType::kQ8_0, {64, 32, 6}},
      {"blk.1.ffn_down_exps.weight", DType::kQ8_0, {32, 64, 6}},
      {"blk.1.ffn_gate_inp_shexp.weight", DType::kF32, {64}},
      {"blk.1.ffn_gate_shexp.weight", DType::kQ8_0, {64, 40}},
      {"blk.1.ffn_up_shexp.weight", DType::kQ8_0, {64, 40}},
      {"blk.1.ffn_down_shexp.weight", DType::kF16, {40, 64}},  // rows of 40: not q8_0 blocks, f16
  };
  for (const auto& [name, type, ne] : want) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->view.type, type) << name;
    ASSERT_EQ(t->view.n_dims, static_cast<int>(ne.size())) << name;
    for (size_t i = 0; i < ne.size(); ++i) EXPECT_EQ(t->view.ne[i], ne[i]) << name << " dim " << i;
  }
  EXPECT_EQ(file->find_tensor("blk.0.ffn_gate.weight"), nullptr);
}

TEST_F(ModelReferenceTest, MoeWithDenseLayersIsRefused) {
  auto c = parse_hf_config(R"({"architectures":["Qwen3MoeForCausalLM"],"hidden_size":8,"num_hidden_layers":2,
      "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"num_experts":4,"num_experts_per_tok":2,
      "moe_intermediate_size":8,"mlp_only_layers":[1]})",
                           "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "x/config.json: decoder_sparse_step / mlp_only_layers make some layers dense; Koi runs MoE models whose "
            "every layer is sparse (decoder_sparse_step 1, mlp_only_layers [])");
}

TEST_F(ModelReferenceTest, MoeTooManyExpertsPerTokenIsAClearError) {
  auto c = parse_hf_config(R"({"architectures":["MixtralForCausalLM"],"hidden_size":8,"num_hidden_layers":2,
      "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"num_local_experts":4,"num_experts_per_tok":5})",
                           "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "x/config.json: model config: experts used per token (5) must be from 1 to the expert count (4)");
}

TEST_F(ModelReferenceTest, MoeMissingExpertIsAClearError) {
  auto loaded = load_hf_weights(path_join(dir_, "mixtral_moe"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  loaded->weights.layers[1].moe.up[3] = TensorView{};
  EXPECT_EQ(validate_weights(loaded->config, loaded->weights).message(), "tensor blk.1.ffn_up_exps[3] is missing");
}

// Gemma 2 with its sliding-window layers' KV kept apart and released once out of the window
// (the engine's split cache): PyTorch's logits at every position, past the window of 5 too.
TEST_F(ModelReferenceTest, Gemma2SplitWindowCacheMatchesPyTorch) {
  const std::string d = path_join(dir_, "gemma2_swa");
  const Reference ref = load_reference(d);
  auto loaded = load_hf_weights(d);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  const Error err = worst_error_split_stepwise(std::move(*loaded), ref);
  EXPECT_LT(err.max_rel, kF32Tolerance);
  std::printf("gemma2, split window cache, token by token: max relative error %.3g\n", err.max_rel);
}

// Each Gemma 2 feature changes these logits: turning any one off in Koi puts it far outside
// the tolerance, so the match above checks all of them, the window at positions past it
// (the longest prompt has 35 tokens, the window is 5).
TEST_F(ModelReferenceTest, Gemma2FeaturesEachMatter) {
  const std::string d = path_join(dir_, "gemma2_swa");
  const Reference ref = load_reference(d);
  const std::vector<std::pair<const char*, void (*)(ModelConfig&)>> ablations = {
      {"no sliding window", [](ModelConfig& c) { c.sliding_window = 0; }},
      {"every layer sliding", [](ModelConfig& c) { c.sliding_pattern = 1000; }},
      {"no attention soft-cap", [](ModelConfig& c) { c.attn_softcap = 0; }},
      {"no final soft-cap", [](ModelConfig& c) { c.final_softcap = 0; }},
      {"default attention scale", [](ModelConfig& c) { c.attn_scale = 0; }},
      {"no embedding scale", [](ModelConfig& c) { c.embedding_scale = 1; }},
      {"SwiGLU", [](ModelConfig& c) { c.ffn_activation = FfnActivation::kSilu; }},
      {"no post-norms", [](ModelConfig& c) { c.post_norms = false; }},
  };
  for (const auto& [what, change] : ablations) {
    auto loaded = load_hf_weights(d);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    change(loaded->config);
    const double err = worst_error(std::move(*loaded), ref).max_rel;
    EXPECT_GT(err, 1e-2) << what;
    std::printf("gemma2 with %s: max relative error %.3g\n", what, err);
  }
}

// The GGUF Koi writes for Gemma 2 has llama.cpp's names and keys, and its norms hold the
// factor (1 + w), as llama.cpp's converter writes them.
TEST_F(ModelReferenceTest, Gemma2GgufUsesLlamaCppNames) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "gemma2_swa"), DType::kF32));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto arch = file->get_string("general.architecture");
  auto window = file->get_int("gemma2.attention.sliding_window");
  auto attn_cap = file->get_float("gemma2.attn_logit_softcapping");
  auto final_cap = file->get_float("gemma2.final_logit_softcapping");
  ASSERT_TRUE(arch.ok() && window.ok() && attn_cap.ok() && final_cap.ok());
  EXPECT_EQ(*arch, "gemma2");
  EXPECT_EQ(*window, 5);
  EXPECT_FLOAT_EQ(*attn_cap, 2.5f);
  EXPECT_FLOAT_EQ(*final_cap, 10.0f);
  for (const char* name : {"blk.2.attn_norm.weight", "blk.2.post_attention_norm.weight", "blk.2.ffn_norm.weight",
                           "blk.2.post_ffw_norm.weight"}) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    ASSERT_EQ(t->view.ne[0], 64) << name;
    double mean = 0;
    for (int i = 0; i < 64; ++i) mean += t->view.f32()[i] / 64;
    EXPECT_NEAR(mean, 1.0, 0.15) << name << " holds 1 + w";  // w ~ N(0, 0.3^2)
  }
  EXPECT_EQ(file->find_tensor("output.weight"), nullptr);  // tied
}

TEST_F(ModelReferenceTest, Gemma2OtherActivationIsRefused) {
  auto c = parse_hf_config(R"({"architectures":["Gemma2ForCausalLM"],"hidden_size":8,"num_hidden_layers":1,
      "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"head_dim":4,"hidden_activation":"relu"})",
                           "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "x/config.json: hidden_activation \"relu\" is not supported; Gemma 2 runs with gelu_pytorch_tanh");
}

// The GGUF Koi writes for Qwen3 is what llama.cpp reads: architecture qwen3, the per-head
// norms as blk.N.attn_q_norm / attn_k_norm of [head_dim], the head width as key_length.
TEST_F(ModelReferenceTest, Qwen3GgufUsesLlamaCppNames) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "qwen3_qknorm"), DType::kF32));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  auto arch = file->get_string("general.architecture");
  auto key_length = file->get_int("qwen3.attention.key_length");
  ASSERT_TRUE(arch.ok() && key_length.ok());
  EXPECT_EQ(*arch, "qwen3");
  EXPECT_EQ(*key_length, 24);
  for (const char* name : {"blk.0.attn_q_norm.weight", "blk.0.attn_k_norm.weight", "blk.1.attn_q_norm.weight",
                           "blk.1.attn_k_norm.weight"}) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->view.type, DType::kF32) << name;
    EXPECT_EQ(t->view.n_dims, 1) << name;
    EXPECT_EQ(t->view.ne[0], 24) << name;
  }
  EXPECT_EQ(file->find_tensor("blk.0.attn_q.bias"), nullptr);
}

// The norms are what makes these Qwen3 logits: skipping them puts Koi far outside tolerance,
// so the comparison above is not passing by accident.
TEST_F(ModelReferenceTest, Qwen3WithoutQkNormDoesNotMatch) {
  std::string d = path_join(dir_, "qwen3_qknorm");
  auto loaded = load_hf_weights(d);
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  loaded->config.qk_norm = false;
  EXPECT_GT(worst_error(std::move(*loaded), load_reference(d)).max_rel, 1e-2);
}

TEST_F(ModelReferenceTest, Qwen3MissingQkNormIsAClearError) {
  auto loaded = load_hf_weights(path_join(dir_, "qwen3_qknorm"));
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  loaded->weights.layers[1].attn_k_norm = TensorView{};
  Status st = validate_weights(loaded->config, loaded->weights);
  EXPECT_EQ(st.message(), "tensor blk.1.attn_k_norm is missing");
}

TEST_F(ModelReferenceTest, SlidingWindowIsRefused) {
  auto c = parse_hf_config(R"({"architectures":["Qwen3ForCausalLM"],"hidden_size":8,"num_hidden_layers":1,
      "num_attention_heads":2,"intermediate_size":16,"vocab_size":10,"use_sliding_window":true,"sliding_window":4})",
                           "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "x/config.json: use_sliding_window is true; Koi does not run sliding-window attention");
}

// Each Gemma 3 feature changes these logits: turning any one off in Koi puts it far outside the
// tolerance. The sliding layers (0, 1 and 3 of 4) see 6 positions of up to 35.
TEST_F(ModelReferenceTest, Gemma3FeaturesEachMatter) {
  const Reference ref = load_reference(path_join(dir_, "gemma3_swa"));
  const std::vector<std::pair<const char*, void (*)(ModelConfig&)>> ablations = {
      {"no sliding window", [](ModelConfig& c) { c.sliding_window = 0; }},
      {"every layer sliding", [](ModelConfig& c) { c.sliding_pattern = 0; }},
      {"Gemma 2's alternation", [](ModelConfig& c) { c.sliding_pattern = 2; }},
      {"the global rope on local layers", [](ModelConfig& c) { c.rope_local_theta = 0; }},
      {"no linear rope scaling", [](ModelConfig& c) { c.rope_scaling.enabled = false; }},
      {"no q/k norms", [](ModelConfig& c) { c.qk_norm = false; }},
      {"default attention scale", [](ModelConfig& c) { c.attn_scale = 0; }},
      {"no final soft-cap", [](ModelConfig& c) { c.final_softcap = 0; }},
      {"no embedding scale", [](ModelConfig& c) { c.embedding_scale = 1; }},
      {"no post-norms", [](ModelConfig& c) { c.post_norms = false; }},
      {"SwiGLU", [](ModelConfig& c) { c.ffn_activation = FfnActivation::kSilu; }},
  };
  for (const auto& [what, change] : ablations) {
    const double err = error_with("gemma3_swa", ref, change);
    EXPECT_GT(err, 1e-2) << what;
    std::printf("gemma3 with %s: max relative error %.3g\n", what, err);
  }
}

// Mistral's and Phi-3's windows (6 and 5 positions, every layer) make their logits.
TEST_F(ModelReferenceTest, MistralAndPhi3WindowsMatter) {
  for (const char* name : {"mistral_swa", "phi3_swa"}) {
    const double err = error_with(name, load_reference(path_join(dir_, name)), [](ModelConfig& c) { c.sliding_window = 0; });
    EXPECT_GT(err, 1e-2) << name;
    std::printf("%s without its window: max relative error %.3g\n", name, err);
  }
}

// Phi-3 LongRoPE: Koi picks the factor set by its context, as llama.cpp does; transformers
// picks it by the length of the sequence in each forward pass. The two agree on every
// sequence when the context is the original one (8 here: the short factors, prompts of 1-7
// tokens) and on sequences longer than it in the full context (256: the long factors, the
// 35-token prompt), from the HF directory and from GGUF; the attention factor and the choice
// of set each matter.
TEST_F(ModelReferenceTest, Phi3LongRopeMatchesOnEachSideOfTheOriginalContext) {
  const std::string d = path_join(dir_, "phi3_longrope");
  const Reference ref = load_reference(d);
  const Reference short_prompts = subset(ref, {0, 1, 2}), long_prompt = subset(ref, {3});
  ASSERT_EQ(long_prompt.prompts[0].size(), 35u);
  const std::string gguf = to_gguf(d, DType::kF32);
  for (bool from_gguf : {false, true}) {
    for (bool original_context : {false, true}) {
      auto loaded = from_gguf ? load_gguf_weights(gguf) : load_hf_weights(d);
      ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
      EXPECT_EQ(loaded->config.rope_original_context, 8);
      EXPECT_NEAR(loaded->config.rope_attn_factor, std::sqrt(1 + std::log(32.0) / std::log(8.0)), 1e-6);
      if (original_context) loaded->config.max_seq_len = 8;
      const double err = worst_error(std::move(*loaded), original_context ? short_prompts : long_prompt).max_rel;
      EXPECT_LT(err, kF32Tolerance) << (from_gguf ? "gguf" : "hf") << (original_context ? " context 8" : " context 256");
      std::printf("phi3 longrope %s, context %d: max relative error %.3g\n", from_gguf ? "gguf" : "hf",
                  original_context ? 8 : 256, err);
    }
  }
  const std::vector<std::tuple<const char*, const Reference*, void (*)(ModelConfig&)>> ablations = {
      {"no attention factor", &long_prompt, [](ModelConfig& c) { c.rope_attn_factor = 1; }},
      {"short factors past the original context", &long_prompt,
       [](ModelConfig& c) { c.rope_factors_long = c.rope_factors_short; }},
      {"long factors within the original context", &short_prompts, [](ModelConfig& c) {
         c.max_seq_len = 8;
         c.rope_factors_short = c.rope_factors_long;
       }},
  };
  for (const auto& [what, r, change] : ablations) {
    const double err = error_with("phi3_longrope", *r, change);
    EXPECT_GT(err, 1e-2) << what;
    std::printf("phi3 longrope with %s: max relative error %.3g\n", what, err);
  }
}

// The GGUF Koi writes for Phi-3 has llama.cpp's phi3 layout: Q/K/V fused in attn_qkv, gate and
// up in ffn_up (gate rows first), LongRoPE as rope_factors_long / rope_factors_short with its
// attention factor and original context, the window under phi3.attention.sliding_window.
TEST_F(ModelReferenceTest, Phi3GgufUsesLlamaCppNames) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "phi3_swa"), DType::kF32));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(*file->get_string("general.architecture"), "phi3");
  EXPECT_EQ(*file->get_int("phi3.attention.sliding_window"), 5);
  const GgufTensorInfo* qkv = file->find_tensor("blk.1.attn_qkv.weight");
  const GgufTensorInfo* up = file->find_tensor("blk.1.ffn_up.weight");
  ASSERT_TRUE(qkv != nullptr && up != nullptr);
  EXPECT_EQ(qkv->view.shape_string(), "[64, 128]");  // q 64 + k 32 + v 32 rows
  EXPECT_EQ(up->view.shape_string(), "[64, 192]");   // gate 96 + up 96 rows
  for (const char* absent : {"blk.0.attn_q.weight", "blk.0.attn_k.weight", "blk.0.attn_v.weight", "blk.0.ffn_gate.weight"}) {
    EXPECT_EQ(file->find_tensor(absent), nullptr) << absent;
  }
  auto longrope = GgufFile::open(to_gguf(path_join(dir_, "phi3_longrope"), DType::kF32));
  ASSERT_TRUE(longrope.ok()) << longrope.status().to_string();
  const GgufTensorInfo* long_factors = longrope->find_tensor("rope_factors_long.weight");
  ASSERT_NE(long_factors, nullptr);
  ASSERT_NE(longrope->find_tensor("rope_factors_short.weight"), nullptr);
  EXPECT_EQ(long_factors->view.ne[0], 8);
  EXPECT_FLOAT_EQ(long_factors->view.f32()[1], 3.5f);  // 1 + 2.5 * 1^1.5
  EXPECT_EQ(*longrope->get_int("phi3.rope.scaling.original_context_length"), 8);
  EXPECT_NEAR(*longrope->get_float("phi3.rope.scaling.attn_factor"), std::sqrt(1 + std::log(32.0) / std::log(8.0)), 1e-6);
  EXPECT_FALSE(longrope->has("phi3.attention.sliding_window"));  // null in config.json
}

// The GGUF Koi writes for Gemma 3 has llama.cpp's gemma3 keys and names, norms holding 1 + w
// (q/k norms too), linear rope scaling as keys, and keys for the pattern where it is not
// llama.cpp's fixed 6; the local base 10000 is llama.cpp's, so no key.
TEST_F(ModelReferenceTest, Gemma3GgufUsesLlamaCppNames) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "gemma3_swa"), DType::kF32));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(*file->get_string("general.architecture"), "gemma3");
  EXPECT_EQ(*file->get_int("gemma3.attention.sliding_window"), 6);
  EXPECT_EQ(*file->get_int("gemma3.attention.sliding_window_pattern"), 3);
  EXPECT_EQ(*file->get_int("gemma3.attention.key_length"), 32);
  EXPECT_EQ(*file->get_string("gemma3.rope.scaling.type"), "linear");
  EXPECT_FLOAT_EQ(*file->get_float("gemma3.rope.scaling.factor"), 4.0f);
  EXPECT_FLOAT_EQ(*file->get_float("gemma3.final_logit_softcapping"), 12.0f);
  EXPECT_FALSE(file->has("gemma3.attn_logit_softcapping"));
  EXPECT_FALSE(file->has("gemma3.rope.freq_base_swa"));
  EXPECT_EQ(file->find_tensor("rope_freqs.weight"), nullptr);
  for (const char* name : {"blk.3.attn_q_norm.weight", "blk.3.attn_k_norm.weight", "blk.3.post_ffw_norm.weight"}) {
    const GgufTensorInfo* t = file->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    double mean = 0;
    for (int64_t i = 0; i < t->view.ne[0]; ++i) mean += t->view.f32()[i] / t->view.ne[0];
    EXPECT_NEAR(mean, 1.0, 0.2) << name << " holds 1 + w";  // w ~ N(0, 0.3^2)
  }
}

// Mistral keeps GGUF architecture llama; its window goes under llama.attention.sliding_window
// (llama.cpp's key name for other architectures; llama.cpp's llama reads none).
TEST_F(ModelReferenceTest, MistralGgufKeepsItsWindow) {
  auto file = GgufFile::open(to_gguf(path_join(dir_, "mistral_swa"), DType::kF32));
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ(*file->get_string("general.architecture"), "llama");
  EXPECT_EQ(*file->get_int("llama.attention.sliding_window"), 6);
  auto loaded = load_gguf_weights(file->path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
  EXPECT_EQ(loaded->config.window_of(0), 6);
  EXPECT_EQ(loaded->config.window_of(1), 6);
}

// Phi-3's fused tensors are checked against the config before they are split: here the
// config says an intermediate size of 48, the file's gate_up_proj holds 2 x 96 rows.
TEST_F(ModelReferenceTest, Phi3FusedTensorOfTheWrongShapeIsAClearError) {
  const std::string d = path_join(dir_, "phi3_swa"), bad = d + "_bad_ffn";
  auto config = read_file(path_join(d, "config.json"));
  auto weights = read_file(path_join(d, "model.safetensors"));
  ASSERT_TRUE(config.ok() && weights.ok());
  auto c = parse_hf_config(*config, "config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->window_of(0), 5);
  EXPECT_EQ(c->window_of(1), 5);
  boost::json::object o = boost::json::parse(*config).as_object();
  o["intermediate_size"] = 48;
  ASSERT_EQ(std::system(("mkdir -p " + bad).c_str()), 0);
  ASSERT_TRUE(write_file_atomic(path_join(bad, "config.json"), boost::json::serialize(o)).ok());
  ASSERT_TRUE(write_file_atomic(path_join(bad, "model.safetensors"), *weights).ok());
  auto loaded = load_hf_weights(bad);
  ASSERT_FALSE(loaded.ok());
  EXPECT_EQ(loaded.status().message(), bad + ": tensor model.layers.0.mlp.gate_up_proj.weight has shape [64, 192] but the "
                                             "config implies [64, 96] (hidden size, 2 intermediate size)");
}

TEST_F(ModelReferenceTest, UnsupportedPhi3AndGemma3SettingsAreRefused) {
  const std::string base = R"("hidden_size":8,"num_hidden_layers":3,"num_attention_heads":2,"intermediate_size":16,
      "vocab_size":10,)";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {R"({"architectures":["Phi3ForCausalLM"],)" + base + R"("partial_rotary_factor":0.75})",
       "x/config.json: partial_rotary_factor 7.5E-1 is not supported; Koi rotates whole heads (1.0)"},
      {R"({"architectures":["Phi3ForCausalLM"],)" + base + R"("rope_scaling":{"type":"longrope","short_factor":[1],
          "long_factor":[1,2]}})",
       "x/config.json: rope_scaling.short_factor must be a list of head_dim/2 = 2 numbers"},
      {R"({"architectures":["Phi3ForCausalLM"],)" + base + R"("rope_scaling":{"type":"yarn","factor":4}})",
       "x/config.json: rope_scaling type 'yarn' is not supported (Koi runs llama3, linear and longrope)"},
      {R"({"architectures":["Gemma3ForCausalLM"],)" + base + R"("head_dim":4,
          "layer_types":["sliding_attention","full_attention","full_attention"]})",
       "x/config.json: layer_types[2] is \"full_attention\"; Koi runs sliding layers in a repeating pattern (of 2 "
       "layers here, so sliding_attention there)"},
      {R"({"architectures":["Gemma3ForCausalLM"],)" + base + R"("head_dim":4,"hidden_activation":"relu"})",
       "x/config.json: hidden_activation \"relu\" is not supported; Gemma 3 runs with gelu_pytorch_tanh"},
      {R"({"architectures":["Gemma3ForCausalLM"],)" + base + R"("head_dim":4,"use_bidirectional_attention":true})",
       "x/config.json: use_bidirectional_attention is true; Koi runs causal decoders only"},
  };
  for (const auto& [text, message] : cases) {
    auto c = parse_hf_config(text, "x/config.json");
    ASSERT_FALSE(c.ok()) << text;
    EXPECT_EQ(c.status().message(), message);
  }
  // Gemma 3 defaults (transformers' Gemma3TextConfig): no soft-caps, five local layers to one
  // global, local rope base 10000.
  auto c = parse_hf_config(R"({"architectures":["Gemma3ForCausalLM"],)" + base + R"("head_dim":4})", "x/config.json");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->attn_softcap, 0.0f);
  EXPECT_EQ(c->final_softcap, 0.0f);
  EXPECT_EQ(c->sliding_pattern, 6);
  EXPECT_EQ(c->rope_local_theta, 10000.0f);
  EXPECT_TRUE(c->qk_norm);
}

// The engine serves each new architecture: greedy tokens through the engine (paged KV,
// chunked prefill under an 8-token budget, two requests batched) equal the model's own
// argmax path (each step recomputes the whole sequence in a fresh cache). Prompt plus output
// run to 30 tokens, past every window.
TEST_F(ModelReferenceTest, EngineGreedyEqualsTheArgmaxPath) {
  constexpr int kBlockSize = 4, kBlocks = 32, kNewTokens = 18;
  for (const char* name : {"mistral_swa", "phi3_swa", "phi3_longrope", "gemma3_swa"}) {
    auto loaded = load_hf_weights(path_join(dir_, name));
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    LlamaModel model(loaded->config, std::move(loaded->weights));
    const std::vector<std::vector<int32_t>> prompts = {{1, 5, 9, 200, 17, 3, 44, 12, 8, 90, 31, 7},
                                                       {2, 40, 41, 42, 43, 100, 101, 102}};
    std::vector<std::vector<int32_t>> argmax_path;
    ThreadPool pool(2);
    for (const auto& prompt : prompts) {
      std::vector<int32_t> ids = prompt, out;
      for (int step = 0; step < kNewTokens; ++step) {
        KvCache kv(model.kv_shape(kBlocks, kBlockSize));
        ForwardBatch batch;
        std::vector<int32_t> table;
        for (int b = 0; b < kBlocks; ++b) table.push_back(b);
        batch.sequences.push_back({table});
        for (size_t i = 0; i < ids.size(); ++i) {
          batch.token_ids.push_back(ids[i]);
          batch.positions.push_back(static_cast<int32_t>(i));
          batch.seq_index.push_back(0);
        }
        batch.logit_indices.push_back(static_cast<int32_t>(ids.size()) - 1);
        std::vector<float> logits(model.config().n_vocab);
        ASSERT_TRUE(model.forward(batch, kv, logits.data(), &pool).ok());
        const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
        ids.push_back(next);
        out.push_back(next);
      }
      argmax_path.push_back(out);
    }
    engine::LlamaRunner runner(model, kBlocks, kBlockSize, 2);
    engine::EngineConfig ec;
    ec.block_size = kBlockSize;
    ec.num_kv_blocks = kBlocks;
    ec.max_num_batched_tokens = 8;
    engine::Engine eng(ec, runner);
    for (size_t r = 0; r < prompts.size(); ++r) {
      engine::RequestSpec spec{"r" + std::to_string(r), prompts[r], engine::test_util::greedy(kNewTokens)};
      ASSERT_TRUE(eng.add_request(spec).ok());
    }
    std::vector<std::vector<int32_t>> served(prompts.size());
    while (eng.has_unfinished()) {
      auto outputs = eng.step();
      ASSERT_TRUE(outputs.ok()) << outputs.status().to_string();
      for (const engine::RequestOutput& o : *outputs) {
        auto& t = served[std::stoi(o.request_id.substr(1))];
        t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
      }
    }
    for (size_t r = 0; r < prompts.size(); ++r) EXPECT_EQ(served[r], argmax_path[r]) << name << " request " << r;
  }
}

TEST_F(ModelReferenceTest, UnsupportedArchitectureIsAClearError) {
  auto c = parse_hf_config(R"({"architectures":["GPT2LMHeadModel"],"hidden_size":8})", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "x/config.json: architecture 'GPT2LMHeadModel' is not supported; Koi runs LlamaForCausalLM, "
            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (text), "
            "Phi3ForCausalLM, MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM");
}

TEST_F(ModelReferenceTest, MissingFieldIsAClearError) {
  auto c = parse_hf_config(R"({"architectures":["LlamaForCausalLM"],"hidden_size":8})", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "x/config.json: missing or non-numeric field \"num_hidden_layers\"");
}

}  // namespace
}  // namespace koi::model
