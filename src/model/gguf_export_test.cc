// GGUF export at K-quant types: llama.cpp's per-tensor choices for the _M mixes, the fallbacks,
// and a mixed file read back and run through the forward pass.
#include "model/gguf_export.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <map>
#include <vector>

#include "base/file.h"
#include "model/llama.h"
#include "model/loader.h"
#include "model/random_model.h"

namespace koi::model {
namespace {

using Mix = ExportType::Mix;

TEST(ExportType, NamesParse) {
  EXPECT_EQ(ExportType::from_name("q4_k_m")->mix, Mix::kQ4_K_M);
  EXPECT_EQ(ExportType::from_name("Q5_K_M")->base, DType::kQ5_K);
  EXPECT_EQ(ExportType::from_name("q6_k")->base, DType::kQ6_K);
  EXPECT_EQ(ExportType::from_name("q6_k")->mix, Mix::kNone);
  EXPECT_EQ(ExportType::from_name("q8_0")->base, DType::kQ8_0);
  EXPECT_FALSE(ExportType::from_name("q3_k").has_value());  // read only
  EXPECT_FALSE(ExportType::from_name("q8_k").has_value());  // activations only
  EXPECT_FALSE(ExportType::from_name("q4_k_s").has_value());
  EXPECT_EQ(ExportType::from_name("q4_k_m")->name(), "q4_K_M");
  EXPECT_EQ(ExportType::from_name("q4_k_m")->file_type(), 15u);
  EXPECT_EQ(ExportType::from_name("q5_k_m")->file_type(), 17u);
  EXPECT_EQ(ExportType::from_name("q6_k")->file_type(), 18u);
}

// TinyLlama's 22 layers: use_more_bits picks layers 0, 1 (< 22/8), 19, 20, 21 (>= 7*22/8) and
// those with (i - 2) % 3 == 2 in between.
TEST(ExportType, MixesFollowLlamaCpp) {
  const std::vector<int> more_bits = {0, 1, 4, 7, 10, 13, 16, 19, 20, 21};
  for (ExportType t : {ExportType(DType::kQ4_K, Mix::kQ4_K_M), ExportType(DType::kQ5_K, Mix::kQ5_K_M)}) {
    SCOPED_TRACE(t.name());
    EXPECT_EQ(t.tensor_type("output.weight", 2048, 22, true), DType::kQ6_K);
    EXPECT_EQ(t.tensor_type("token_embd.weight", 2048, 22, true), t.base);
    EXPECT_EQ(t.tensor_type("token_embd.weight", 2048, 22, false), DType::kQ6_K);  // tied: it is the output
    for (int layer = 0; layer < 22; ++layer) {
      const std::string p = "blk." + std::to_string(layer) + ".";
      const bool more = std::find(more_bits.begin(), more_bits.end(), layer) != more_bits.end();
      EXPECT_EQ(t.tensor_type(p + "attn_v.weight", 2048, 22, true), more ? DType::kQ6_K : t.base) << layer;
      EXPECT_EQ(t.tensor_type(p + "ffn_down.weight", 5632, 22, true), more ? DType::kQ6_K : t.base) << layer;
      for (const char* other : {"attn_q.weight", "attn_k.weight", "attn_output.weight", "ffn_gate.weight", "ffn_up.weight"}) {
        EXPECT_EQ(t.tensor_type(p + other, 2048, 22, true), t.base) << layer << " " << other;
      }
    }
  }
  // Phi-3's fused Q/K/V goes one step up, as llama.cpp's llama_tensor_get_type has it.
  EXPECT_EQ(ExportType(DType::kQ4_K, Mix::kQ4_K_M).tensor_type("blk.3.attn_qkv.weight", 3072, 32, true), DType::kQ5_K);
  EXPECT_EQ(ExportType(DType::kQ5_K, Mix::kQ5_K_M).tensor_type("blk.3.attn_qkv.weight", 3072, 32, true), DType::kQ6_K);
  // A plain K-quant type is every matrix's type.
  EXPECT_EQ(ExportType(DType::kQ4_K).tensor_type("output.weight", 2048, 22, true), DType::kQ4_K);
  EXPECT_EQ(ExportType(DType::kQ4_K).tensor_type("blk.0.attn_v.weight", 2048, 22, true), DType::kQ4_K);
}

TEST(ExportType, RowsTheBlocksDoNotDivideFallBack) {
  const ExportType q4km(DType::kQ4_K, Mix::kQ4_K_M);
  EXPECT_EQ(q4km.tensor_type("blk.3.attn_q.weight", 288, 6, true), DType::kQ8_0);   // 288 = 9 * 32
  EXPECT_EQ(q4km.tensor_type("output.weight", 288, 6, true), DType::kQ8_0);         // q6_K -> q8_0
  EXPECT_EQ(q4km.tensor_type("blk.0.ffn_down.weight", 172, 6, true), DType::kF16);  // not even 32
  EXPECT_EQ(ExportType(DType::kQ6_K).tensor_type("blk.1.ffn_up.weight", 64, 6, true), DType::kQ8_0);
  EXPECT_EQ(ExportType(DType::kQ4_0).tensor_type("blk.1.ffn_up.weight", 48, 6, true), DType::kF16);
}

// A random model whose matrices all have rows of multiples of 256: written at each K-quant
// type, read back (types per tensor as chosen), and run: the logits stay within each type's
// error of the f32 model's, and the forward pass is batch invariant (one batch of 6 tokens gives
// bitwise the logits of 6 single-token steps).
class KQuantModelTest : public ::testing::Test {
 protected:
  static ModelConfig config() {
    ModelConfig c = *named_shape("tiny");
    c.dim = 256, c.n_layers = 8, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 512, c.n_vocab = 512;
    c.head_dim = c.dim / c.n_heads;
    return c;
  }

  void SetUp() override {
    auto dir = make_temp_dir("koi-kquant-export");
    ASSERT_TRUE(dir.ok());
    dir_ = *dir;
  }
  void TearDown() override { remove_all(dir_); }

  std::string write(const ExportType& type) {
    const ModelConfig c = config();
    GgufWriter writer;
    auto stats = add_model_to_gguf(c, random_weights(c, 5), type, writer);
    EXPECT_TRUE(stats.ok()) << stats.status().to_string();
    EXPECT_EQ(stats->fallback_tensors, 0);
    const std::string path = path_join(dir_, type.name() + ".gguf");
    Status st = writer.write(path);
    EXPECT_TRUE(st.ok()) << st.to_string();
    return path;
  }

  // Logits of `tokens` as one prefill batch (batched) or one token per forward (stepped).
  static std::vector<float> logits(LoadedWeights loaded, const std::vector<int32_t>& tokens, bool batched) {
    LlamaModel model(loaded.config, std::move(loaded.weights));
    const int vocab = model.config().n_vocab;
    KvCache kv(model.kv_shape(4, 16));
    const std::vector<int32_t> table = {2};
    ThreadPool pool(2);
    std::vector<float> out(tokens.size() * vocab);
    const size_t step = batched ? tokens.size() : 1;
    for (size_t begin = 0; begin < tokens.size(); begin += step) {
      ForwardBatch batch;
      batch.sequences.push_back({table});
      for (size_t i = begin; i < begin + step; ++i) {
        batch.logit_indices.push_back(static_cast<int32_t>(i - begin));
        batch.token_ids.push_back(tokens[i]);
        batch.positions.push_back(static_cast<int32_t>(i));
        batch.seq_index.push_back(0);
      }
      Status st = model.forward(batch, kv, out.data() + begin * vocab, &pool);
      EXPECT_TRUE(st.ok()) << st.to_string();
    }
    return out;
  }

  std::string dir_;
};

// sqrt(sum (got - ref)^2 / sum ref^2): the logits' error relative to their size.
double rms_relative_error(const std::vector<float>& got, const std::vector<float>& ref) {
  double sq_ref = 0, sq_diff = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    sq_ref += static_cast<double>(ref[i]) * ref[i];
    sq_diff += static_cast<double>(got[i] - ref[i]) * (got[i] - ref[i]);
  }
  return std::sqrt(sq_diff / sq_ref);
}

TEST_F(KQuantModelTest, MixedFilesLoadAndRun) {
  const std::vector<int32_t> tokens = {1, 17, 300, 42, 511, 7};
  auto f32 = load_gguf_weights(write(ExportType(DType::kF32)));
  ASSERT_TRUE(f32.ok());
  const std::vector<float> ref = logits(std::move(*f32), tokens, true);
  // rms(logits - f32 logits) / rms(f32 logits) of this random 8-layer model, measured at seed 5:
  // q4_K_M 0.154, q5_K_M 0.084, q4_K 0.176, q5_K 0.095, q6_K 0.052 (each extra bit about halves
  // it; the mixes' q6_K tensors take a tenth off); bounds 1.5x those.
  struct Case { ExportType type; double bound; };
  for (Case c : {Case{ExportType(DType::kQ4_K, Mix::kQ4_K_M), 0.23}, Case{ExportType(DType::kQ5_K, Mix::kQ5_K_M), 0.13},
                 Case{ExportType(DType::kQ4_K), 0.26}, Case{ExportType(DType::kQ5_K), 0.14},
                 Case{ExportType(DType::kQ6_K), 0.078}}) {
    SCOPED_TRACE(c.type.name());
    const std::string path = write(c.type);
    auto file = GgufFile::open(path);
    ASSERT_TRUE(file.ok()) << file.status().to_string();
    std::map<std::string, DType> types;
    for (const GgufTensorInfo& t : file->tensors()) types[t.name] = t.view.type;
    const ModelConfig cfg = config();
    for (const auto& [name, type] : types) {
      if (name.ends_with("norm.weight")) {
        EXPECT_EQ(type, DType::kF32) << name;
      } else {
        EXPECT_EQ(type, c.type.tensor_type(name, 256, cfg.n_layers, true)) << name;
      }
    }
    if (c.type.mix != Mix::kNone) {
      EXPECT_EQ(types["output.weight"], DType::kQ6_K);
      EXPECT_EQ(types["blk.3.attn_v.weight"], DType::kQ6_K);   // use_more_bits(3, 8)
      EXPECT_EQ(types["blk.2.ffn_down.weight"], c.type.base);  // not
    }
    auto loaded = load_gguf_weights(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    auto again = load_gguf_weights(path);
    ASSERT_TRUE(again.ok());
    const std::vector<float> batched = logits(std::move(*loaded), tokens, true);
    const std::vector<float> stepped = logits(std::move(*again), tokens, false);
    EXPECT_EQ(0, std::memcmp(batched.data(), stepped.data(), batched.size() * sizeof(float)));
    const double rms_rel = rms_relative_error(batched, ref);
    std::printf("%s: rms relative logit error %.4f\n", c.type.name().c_str(), rms_rel);
    EXPECT_LT(rms_rel, c.bound);
  }
}

// q8_0 and q4_0 files: LlamaModel packs every per-step matrix once (packed_weights.h) and gives
// back the mapped pages of those tensors; their views still read the file's bytes, and one batch
// of 6 tokens gives bitwise the logits of 6 single-token steps, within the type's error of the
// f32 model (rms relative error measured at seed 5: q8_0 0.0193, q4_0 0.229; bounds 1.5x).
TEST_F(KQuantModelTest, Q8AndQ4FilesArePackedOnceAndTheirPagesGivenBack) {
  const std::vector<int32_t> tokens = {1, 17, 300, 42, 511, 7};
  auto f32 = load_gguf_weights(write(ExportType(DType::kF32)));
  ASSERT_TRUE(f32.ok());
  const std::vector<float> ref = logits(std::move(*f32), tokens, true);
  for (auto [type, bound] : {std::pair{DType::kQ8_0, 0.029}, std::pair{DType::kQ4_0, 0.34}}) {
    SCOPED_TRACE(dtype_name(type));
    const std::string path = write(ExportType(type));
    auto loaded = load_gguf_weights(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status().to_string();
    const TensorView up = loaded->weights.layers[0].w_up;
    ASSERT_EQ(up.type, type);
    const auto* up_bytes = static_cast<const uint8_t*>(up.data);
    const std::vector<uint8_t> before(up_bytes, up_bytes + up.num_bytes());
    int64_t matrix_bytes = loaded->weights.output.num_bytes();  // every row count is a multiple of 16
    for (const LayerWeights& L : loaded->weights.layers) {
      for (const TensorView* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.w_gate, &L.w_up, &L.w_down}) matrix_bytes += m->num_bytes();
    }
    {
      LlamaModel model(loaded->config, std::move(loaded->weights));
      EXPECT_NE(model.packed().layers[0].w_up.panels(), nullptr);
      EXPECT_EQ(model.packed().packed_bytes, matrix_bytes);
      EXPECT_GT(model.packed().released_bytes, matrix_bytes / 2);
      EXPECT_EQ(0, std::memcmp(model.weights().layers[0].w_up.data, before.data(), before.size()))
          << "a packed tensor's view no longer reads the file's bytes";
    }
    auto loaded_again = load_gguf_weights(path);
    auto stepped_weights = load_gguf_weights(path);
    ASSERT_TRUE(loaded_again.ok() && stepped_weights.ok());
    const std::vector<float> batched = logits(std::move(*loaded_again), tokens, true);
    const std::vector<float> stepped = logits(std::move(*stepped_weights), tokens, false);
    EXPECT_EQ(0, std::memcmp(batched.data(), stepped.data(), batched.size() * sizeof(float)));
    const double rms_rel = rms_relative_error(batched, ref);
    std::printf("%s: rms relative logit error %.4f\n", dtype_name(type).data(), rms_rel);
    EXPECT_LT(rms_rel, bound);
  }
}

}  // namespace
}  // namespace koi::model
