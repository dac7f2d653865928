#include "model/gguf_export.h"

#include "model/moe.h"

#include <cmath>
#include <cstring>
#include <vector>

namespace koi::model {
namespace {

// llama.cpp's use_more_bits: the first and last eighth of the layers and every third in between.
bool use_more_bits(int layer, int n_layers) {
  return layer < n_layers / 8 || layer >= 7 * n_layers / 8 || (layer - n_layers / 8) % 3 == 2;
}

// The layer of "blk.<i>.<rest>", or -1.
int layer_of(std::string_view tensor) {
  if (!tensor.starts_with("blk.")) return -1;
  int layer = 0;
  size_t i = 4;
  for (; i < tensor.size() && tensor[i] >= '0' && tensor[i] <= '9'; ++i) layer = layer * 10 + (tensor[i] - '0');
  return i > 4 && i < tensor.size() && tensor[i] == '.' ? layer : -1;
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

// The rows of `parts` (matrices of one row length) one after another, in f32: Phi-3's fused
// attn_qkv (Q, K, V) and ffn_up (gate, up).
std::vector<float> concat_rows(std::initializer_list<const TensorView*> parts) {
  std::vector<float> out;
  for (const TensorView* t : parts) {
    std::vector<float> rows = to_f32(*t);
    out.insert(out.end(), rows.begin(), rows.end());
  }
  return out;
}

// The settings of each architecture beyond the common keys (llama.cpp's names). Gemma: the
// soft-caps, the window, and keys for what llama.cpp fixes but Koi's file differs in (the
// attention scale; Gemma 3's layer pattern 6 and local rope base 10000). Mistral (llama) and
// Phi-3: the window on every layer.
Status add_arch_settings(const ModelConfig& c, GgufWriter& writer) {
  const std::string& a = c.arch;
  if (c.rope_local_theta > 0 && a != "gemma3") {
    return Status::unsupported("export: GGUF " + a + " has no separate rope base for sliding-window layers");
  }
  if (a == "gemma2" || a == "gemma3") {
    if (c.attn_softcap > 0) writer.set_f32(a + ".attn_logit_softcapping", c.attn_softcap);
    if (c.final_softcap > 0) writer.set_f32(a + ".final_logit_softcapping", c.final_softcap);
    if (c.sliding_window > 0) writer.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
    // llama.cpp scales queries by 1/sqrt(head_dim); a different scale is kept for Koi.
    if (c.attention_scale() != 1.0f / std::sqrt(static_cast<float>(c.head_dim))) {
      writer.set_f32(a + ".attention.scale", c.attention_scale());
    }
  }
  if (a == "gemma2" && c.sliding_pattern != 2 && c.sliding_window > 0) {
    return Status::unsupported("export: GGUF gemma2 alternates sliding and global layers (pattern 2)");
  }
  if (a == "gemma3") {
    if (c.sliding_pattern != 6) {
      writer.set_u32("gemma3.attention.sliding_window_pattern", static_cast<uint32_t>(c.sliding_pattern));
    }
    const float local_theta = c.rope_local_theta > 0 ? c.rope_local_theta : c.rope_theta;
    if (local_theta != 10000.0f) writer.set_f32("gemma3.rope.freq_base_swa", local_theta);
  }
  if (a != "gemma2" && a != "gemma3" && c.sliding_window > 0) {
    if (c.sliding_pattern != 0 || (a != "llama" && a != "phi3")) {
      return Status::unsupported("export: GGUF " + a + " has no sliding-window layers in a pattern");
    }
    writer.set_u32(a + ".attention.sliding_window", static_cast<uint32_t>(c.sliding_window));
  }
  return ok_status();
}

}  // namespace

std::optional<ExportType> ExportType::from_name(std::string_view name) {
  std::string lower(name);
  for (char& ch : lower) ch = static_cast<char>(ch >= 'A' && ch <= 'Z' ? ch - 'A' + 'a' : ch);
  if (lower == "q4_k_m") return ExportType(DType::kQ4_K, Mix::kQ4_K_M);
  if (lower == "q5_k_m") return ExportType(DType::kQ5_K, Mix::kQ5_K_M);
  std::optional<DType> t = dtype_from_name(lower);
  if (!t || *t == DType::kQ2_K || *t == DType::kQ3_K || *t == DType::kQ8_K) return std::nullopt;
  return ExportType(*t);
}

std::string ExportType::name() const {
  switch (mix) {
    case Mix::kQ4_K_M: return "q4_K_M";
    case Mix::kQ5_K_M: return "q5_K_M";
    case Mix::kNone: break;
  }
  return std::string(dtype_name(base));
}

DType ExportType::tensor_type(std::string_view tensor, int64_t row_length, int n_layers, bool has_output) const {
  DType t = base;
  if (mix != Mix::kNone) {
    const int layer = layer_of(tensor);
    if (tensor == "output.weight" || (!has_output && tensor == "token_embd.weight")) {
      t = DType::kQ6_K;
    } else if (layer >= 0 && (tensor.ends_with(".attn_v.weight") || tensor.ends_with(".ffn_down.weight")) &&
               use_more_bits(layer, n_layers)) {
      t = DType::kQ6_K;
    } else if (tensor.ends_with(".attn_qkv.weight")) {  // fused Q/K/V (Phi-3): one step up
      t = mix == Mix::kQ4_K_M ? DType::kQ5_K : DType::kQ6_K;
    }
  }
  if (row_length % dtype_block_size(t) != 0 && dtype_is_kquant(t)) t = DType::kQ8_0;
  if (row_length % dtype_block_size(t) != 0) t = DType::kF16;
  return t;
}

uint32_t ExportType::file_type() const {
  if (mix == Mix::kQ4_K_M) return 15;  // LLAMA_FTYPE_MOSTLY_Q4_K_M
  if (mix == Mix::kQ5_K_M) return 17;  // LLAMA_FTYPE_MOSTLY_Q5_K_M
  switch (base) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ8_0: return 7;
    case DType::kQ4_K: return 14;  // no pure q4_K file type in llama.cpp; Q4_K_S is the closest
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;  // LLAMA_FTYPE_MOSTLY_Q6_K
    case DType::kBF16: return 32;
    default: return 0;
  }
}

Result<ExportStats> add_model_to_gguf(const ModelConfig& c, const ModelWeights& w, ExportType weight_type,
                                      GgufWriter& writer) {
  KOI_RETURN_IF_ERROR(c.validate());
  const std::string a = gguf_architecture(c);
  writer.set_string("general.architecture", a);
  writer.set_string("general.name", c.name.empty() ? "koi-model" : c.name);
  writer.set_u32("general.file_type", weight_type.file_type());
  if (dtype_block_size(weight_type.base) > 1) writer.set_u32("general.quantization_version", 2);
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
  KOI_RETURN_IF_ERROR(add_arch_settings(c, writer));
  if (c.moe.enabled()) add_moe_metadata(c, a, writer);
  if (c.head_dim * c.n_heads != c.dim) {
    writer.set_u32(a + ".attention.key_length", static_cast<uint32_t>(c.head_dim));
    writer.set_u32(a + ".attention.value_length", static_cast<uint32_t>(c.head_dim));
  }

  // The target layout: "llama" files rotate interleaved pairs, "qwen2"/"qwen3" files rotate halves.
  const bool permute_qk = a == "llama" && c.rope_style == kernels::RopeStyle::kNeox;
  if (a != "llama" && c.rope_style != kernels::RopeStyle::kNeox) {
    return Status::unsupported("export: a " + a + " model with interleaved rope cannot be written as GGUF " + a);
  }
  if (c.qk_norm != (c.arch == "qwen3" || c.arch == "gemma3")) {
    return Status::unsupported("export: GGUF " + a + (c.qk_norm ? " has no" : " needs") + " per-head Q/K norms");
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
    DType type = DType::kF32;
    if (matrix) {
      type = weight_type.tensor_type(name, t.ne[0], c.n_layers, !c.tied_embeddings);
      if (t.ne[0] % dtype_block_size(weight_type.base) != 0) ++stats.fallback_tensors;
    }
    const int64_t rows = t.num_rows(), row_bytes = dtype_row_bytes(type, t.ne[0]);
    std::vector<uint8_t> bytes(static_cast<size_t>(rows * row_bytes));
    for (int64_t r = 0; r < rows; ++r) quantize_row(type, data.data() + r * t.ne[0], bytes.data() + r * row_bytes, t.ne[0]);
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    stats.bytes += static_cast<int64_t>(bytes.size());
    ++stats.tensors;
    writer.add_tensor(name, type, std::move(ne), std::move(bytes));
  };
  // The experts of one MoE tensor, stacked as llama.cpp stores them: {in, out, n_experts}.
  auto add_stacked = [&](const std::string& name, const std::vector<TensorView>& experts) {
    const int64_t in = experts[0].ne[0], out = experts[0].ne[1];
    const DType type = weight_type.tensor_type(name, in, c.n_layers, !c.tied_embeddings);
    if (in % dtype_block_size(weight_type.base) != 0) ++stats.fallback_tensors;
    const int64_t row_bytes = dtype_row_bytes(type, in);
    std::vector<uint8_t> bytes(static_cast<size_t>(experts.size() * out * row_bytes));
    for (size_t e = 0; e < experts.size(); ++e) {
      const std::vector<float> data = to_f32(experts[e]);
      for (int64_t r = 0; r < out; ++r) {
        quantize_row(type, data.data() + r * in, bytes.data() + (static_cast<int64_t>(e) * out + r) * row_bytes, in);
      }
    }
    stats.bytes += static_cast<int64_t>(bytes.size());
    ++stats.tensors;
    writer.add_tensor(name, type, {in, out, static_cast<int64_t>(experts.size())}, std::move(bytes));
  };

  auto add_vector = [&](const std::string& name, const std::vector<float>& v) {
    add(name, make_view(DType::kF32, {static_cast<int64_t>(v.size())}, v.data()), false, 0);
  };
  // Phi-3's fused matrices: [dim, rows] in f32, then typed like any matrix.
  auto add_fused = [&](const std::string& name, std::initializer_list<const TensorView*> parts) {
    std::vector<float> rows = concat_rows(parts);
    const int64_t width = (*parts.begin())->ne[0];
    add(name, make_view(DType::kF32, {width, static_cast<int64_t>(rows.size()) / width}, rows.data()), true, 0);
  };

  add("token_embd.weight", w.token_embd, true, 0);
  add("output_norm.weight", w.output_norm, false, 0);
  if (!c.tied_embeddings) add("output.weight", w.output, true, 0);
  if (!c.rope_factors_long.empty()) {  // LongRoPE, as llama.cpp's phi3 reads it
    add_vector("rope_factors_long.weight", c.rope_factors_long);
    add_vector("rope_factors_short.weight", c.rope_factors_short);
    writer.set_f32(a + ".rope.scaling.attn_factor", c.rope_attn_factor);
    writer.set_u32(a + ".rope.scaling.original_context_length", static_cast<uint32_t>(c.rope_original_context));
  } else if (c.rope_factors.empty() && c.rope_scaling.enabled && c.rope_scaling.type == RopeScaling::Type::kLinear) {
    writer.set_string(a + ".rope.scaling.type", "linear");
    writer.set_f32(a + ".rope.scaling.factor", c.rope_scaling.factor);
  } else if (std::vector<float> factors = c.rope_freq_factors(); !factors.empty()) {
    add_vector("rope_freqs.weight", factors);
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string p = "blk." + std::to_string(l) + ".";
    add(p + "attn_norm.weight", L.attn_norm, false, 0);
    if (a == "phi3") {
      add_fused(p + "attn_qkv.weight", {&L.wq, &L.wk, &L.wv});
    } else {
      add(p + "attn_q.weight", L.wq, true, permute_qk ? c.n_heads : 0);
      add(p + "attn_k.weight", L.wk, true, permute_qk ? c.n_kv_heads : 0);
      add(p + "attn_v.weight", L.wv, true, 0);
    }
    add(p + "attn_output.weight", L.wo, true, 0);
    add(p + "attn_q.bias", L.bq, false, permute_qk ? c.n_heads : 0);
    add(p + "attn_k.bias", L.bk, false, permute_qk ? c.n_kv_heads : 0);
    add(p + "attn_v.bias", L.bv, false, 0);
    add(p + "attn_q_norm.weight", L.attn_q_norm, false, 0);
    add(p + "attn_k_norm.weight", L.attn_k_norm, false, 0);
    add(p + "post_attention_norm.weight", L.attn_post_norm, false, 0);
    add(p + "ffn_norm.weight", L.ffn_norm, false, 0);
    add(p + "post_ffw_norm.weight", L.ffn_post_norm, false, 0);
    if (a == "phi3") {
      add_fused(p + "ffn_up.weight", {&L.w_gate, &L.w_up});
    } else {
      add(p + "ffn_gate.weight", L.w_gate, true, 0);
      add(p + "ffn_up.weight", L.w_up, true, 0);
    }
    add(p + "ffn_down.weight", L.w_down, true, 0);
    if (c.moe.enabled()) {
      add_moe_tensors(L.moe, p, [&](const std::string& name, const TensorView& t, bool matrix) { add(name, t, matrix, 0); },
                      add_stacked);
    }
  }
  return stats;
}

}  // namespace koi::model
