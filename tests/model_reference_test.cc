// The forward pass against an independent oracle: tiny random Llama-family models (Llama,
// Llama 3 rope scaling, Mistral, Qwen2, Qwen3 with per-head Q/K norms, Gemma 2 with GeGLU,
// post-norms, soft-caps and sliding-window layers) in Hugging Face format, made by tests/reference/tiny_models.py with Debian's PyTorch, whose
// float64 logits are the reference. Koi must match them within 1e-4 relative error
// (max |koi - ref| / max |ref| over each prompt's logits), loading the HF directory directly
// and after conversion to GGUF at f32; q8_0 and q4_0 GGUF conversions must stay within the
// tolerances stated below.
#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/file.h"
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
        batch.sequences.push_back({full, window});
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
                                           "qwen3_qknorm", "qwen3_tied", "gemma2_swa"));

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

TEST_F(ModelReferenceTest, UnsupportedArchitectureIsAClearError) {
  auto c = parse_hf_config(R"({"architectures":["GPT2LMHeadModel"],"hidden_size":8})", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(),
            "x/config.json: architecture 'GPT2LMHeadModel' is not supported; Koi runs LlamaForCausalLM, "
            "MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and Gemma2ForCausalLM");
}

TEST_F(ModelReferenceTest, MissingFieldIsAClearError) {
  auto c = parse_hf_config(R"({"architectures":["LlamaForCausalLM"],"hidden_size":8})", "x/config.json");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "x/config.json: missing or non-numeric field \"num_hidden_layers\"");
}

}  // namespace
}  // namespace koi::model
