#include "model/gguf_export.h"

#include <cstring>
#include <vector>

namespace koi::model {
namespace {

// llama.cpp's general.file_type for an all-`t` model.
uint32_t gguf_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 7;
    case DType::kBF16: return 32;
  }
  return 0;
}

// Reorders the rows of each head from Hugging Face's rotate-half layout (pair i is rows i and
// i + head_dim/2) to the interleaved layout (pair i is rows 2i and 2i+1). rows is [n_rows, width].
std::vector<float> permute_for_interleaved_rope(const std::vector<float>& rows, int64_t width, int n_heads,
                                                int head_dim) {
  std::vector<float> out(rows.size());
  const int half = head_dim / 2;
  for (int head_idx = 0; head_idx < n_heads; ++head_idx) {
    for (int pair = 0; pair < half; ++pair) {
      for (int part = 0; part < 2; ++part) {
        const int64_t src = static_cast<int64_t>(head_idx) * head_dim + part * half + pair;
        const int64_t dst = static_cast<int64_t>(head_idx) * head_dim + 2 * pair + part;
        std::memcpy(out.data() + dst * width, rows.data() + src * width, static_cast<size_t>(width) * sizeof(float));
      }
    }
  }
  return out;
}

std::vector<float> to_f32(const TensorView& t) {
  std::vector<float> out(static_cast<size_t>(t.num_elements()));
  for (int64_t r = 0; r < t.num_rows(); ++r) dequantize_row(t.type, t.row(r), out.data() + r * t.ne[0], t.ne[0]);
  return out;
}

}  // namespace

Result<ExportStats> add_model_to_gguf(const ModelConfig& c, const ModelWeights& w, DType weight_type,
                                      GgufWriter& writer) {
  KOI_RETURN_IF_ERROR(c.validate());
  const std::string& a = c.arch;
  writer.set_string("general.architecture", a);
  writer.set_string("general.name", c.name.empty() ? "koi-model" : c.name);
  writer.set_u32("general.file_type", gguf_file_type(weight_type));
  writer.set_u32(a + ".context_length", static_cast<uint32_t>(c.max_seq_len));
  writer.set_u32(a + ".embedding_length", static_cast<uint32_t>(c.dim));
  writer.set_u32(a + ".block_count", static_cast<uint32_t>(c.n_layers));
  writer.set_u32(a + ".feed_forward_length", static_cast<uint32_t>(c.ffn_dim));
  writer.set_u32(a + ".attention.head_count", static_cast<uint32_t>(c.n_heads));
  writer.set_u32(a + ".attention.head_count_kv", static_cast<uint32_t>(c.n_kv_heads));
  writer.set_f32(a + ".attention.layer_norm_rms_epsilon", c.norm_eps);
  writer.set_f32(a + ".rope.freq_base", c.rope_theta);
  writer.set_u32(a + ".rope.dimension_count", static_cast<uint32_t>(c.head_dim));
  writer.set_u32(a + ".vocab_size", static_cast<uint32_t>(c.n_vocab));
  if (c.head_dim * c.n_heads != c.dim) {
    writer.set_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
    writer.set_u32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  }

  // The target layout: "llama" files rotate interleaved pairs, "qwen2" files rotate halves.
  const bool permute_qk = a == "llama" && c.rope_style == kernels::RopeStyle::kNeox;
  if (a == "qwen2" && c.rope_style != kernels::RopeStyle::kNeox) {
    return Status::unsupported("export: a qwen2 model with interleaved rope cannot be written as GGUF qwen2");
  }

  ExportStats stats;
  // n_heads_permute > 0 reorders rows per head (Q: n_heads, K: n_kv_heads).
  auto add = [&](const std::string& name, const TensorView& t, bool matrix, int n_heads_permute) {
    if (t.data == nullptr) return;
    std::vector<float> data = to_f32(t);
    if (n_heads_permute > 0) {
      const int64_t width = t.n_dims == 1 ? 1 : t.ne[0];  // a bias has one value per row
      data = permute_for_interleaved_rope(data, width, n_heads_permute, c.head_dim);
    }
    DType type = matrix ? weight_type : DType::kF32;
    if (t.ne[0] % dtype_block_size(type) != 0) {
      type = DType::kF16;
      ++stats.fallback_tensors;
    }
    const int64_t rows = t.num_rows(), row_bytes = dtype_row_bytes(type, t.ne[0]);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, data.data() + r * t.ne[0], bytes.data() + r * row_bytes, t.ne[0]);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    stats.bytes += static_cast<int64_t>(bytes.size());
    ++stats.tensors;
    writer.add_tensor(name, type, std::move(ne), std::move(bytes));
  };

  add("token_embd.weight", w.token_embd, true, 0);
  add("output_norm.weight", w.output_norm, false, 0);
  if (!c.tied_embeddings) add("output.weight", w.output, true, 0);
  std::vector<float> factors = c.rope_freq_factors();
  if (!factors.empty()) {
    add("rope_freqs.weight", make_view(DType::kF32, {static_cast<int64_t>(factors.size())}, factors.data()), false, 0);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", L.attn_norm, false, 0);
    add(p + "attn_q.weight", L.wq, true, permute_qk ? c.n_heads : 0);
    add(p + "attn_k.weight", L.wk, true, permute_qk ? c.n_kv_heads : 0);
    add(p + "attn_v.weight", L.wv, true, 0);
    add(p + "attn_output.weight", L.wo, true, 0);
    add(p + "attn_q.bias", L.bq, false, permute_qk ? c.n_heads : 0);
    add(p + "attn_k.bias", L.bk, false, permute_qk ? c.n_kv_heads : 0);
    add(p + "attn_v.bias", L.bv, false, 0);
    add(p + "ffn_norm.weight", L.ffn_norm, false, 0);
    add(p + "ffn_gate.weight", L.w_gate, true, 0);
    add(p + "ffn_up.weight", L.w_up, true, 0);
    add(p + "ffn_down.weight", L.w_down, true, 0);
  }
  return stats;
}

}  // namespace koi::model
