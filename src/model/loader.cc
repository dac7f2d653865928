#include "model/loader.h"

#include <boost/json.hpp>

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "base/file.h"
#include "model/gguf.h"
#include "model/llama.h"
#include "model/moe.h"
#include "model/safetensors.h"

namespace koi::model {
namespace {

namespace json = boost::json;

constexpr char kGgufMagic[] = "GGUF";

// The largest size, count or length Koi reads from a model file (2^24: 16M); products of two
// (head_dim * heads) are checked against it too, so nothing downstream overflows an int.
constexpr int64_t kMaxSetting = int64_t{1} << 24;

// An integer setting read from `file` under `key`, range-checked as int64 before it is
// narrowed to int.
Result<int> setting(const std::string& file, std::string_view key, int64_t value, int64_t min = 1) {
  if (value < min || value > kMaxSetting) {
    return Status::invalid_argument(file + ": " + std::string(key) + " must be an integer from " + std::to_string(min) +
                                    " to " + std::to_string(kMaxSetting) + ", got " + std::to_string(value));
  }
  return static_cast<int>(value);
}

// A real-valued setting that must be finite and > 0 (rope theta, norm epsilon, scaling factors).
Status positive(const std::string& file, std::string_view key, double value) {
  if (!(value > 0) || !std::isfinite(value)) {
    return Status::invalid_argument(file + ": " + std::string(key) + " must be a positive number, got " + fmt::format("{}", value));
  }
  return ok_status();
}

// How one file format names the settings that must agree with each other.
struct HeadKeys {
  std::string dim, heads, kv_heads, head_dim;
};

// Heads and dimensions agree: key/value heads divide the heads, the head dimension is even
// (rope rotates pairs), a head dimension derived from dim / heads divides evenly, and the
// query and key/value widths stay in range.
Status check_heads(const std::string& file, const HeadKeys& k, const ModelConfig& c, bool head_dim_given) {
  auto bad = [&](const std::string& what) { return Status::invalid_argument(file + ": " + what); };
  if (c.n_heads % c.n_kv_heads != 0) {
    return bad(fmt::format("{} ({}) must divide {} ({})", k.kv_heads, c.n_kv_heads, k.heads, c.n_heads));
  }
  if (!head_dim_given && c.dim % c.n_heads != 0) {
    return bad(fmt::format("{} ({}) must be a multiple of {} ({}), or give {}", k.dim, c.dim, k.heads, c.n_heads, k.head_dim));
  }
  if (c.head_dim % 2 != 0) return bad(fmt::format("{} ({}) must be even: rope rotates pairs", k.head_dim, c.head_dim));
  if (static_cast<int64_t>(c.head_dim) * c.n_heads > kMaxSetting) {
    return bad(fmt::format("{} * {} = {} is more than {}", k.head_dim, k.heads, static_cast<int64_t>(c.head_dim) * c.n_heads,
                           kMaxSetting));
  }
  return ok_status();
}

// Where each tensor lives in the two naming schemes: GGUF (llama.cpp) and Hugging Face.
struct TensorNames {
  const char* gguf;
  const char* hf;
};
constexpr TensorNames kEmbedding{"token_embd.weight", "model.embed_tokens.weight"};
constexpr TensorNames kOutputNorm{"output_norm.weight", "model.norm.weight"};
constexpr TensorNames kOutput{"output.weight", "lm_head.weight"};
struct LayerTensor {
  TensorView LayerWeights::*member;
  TensorNames names;  // suffixes after "blk.N." / "model.layers.N."
};
constexpr LayerTensor kLayerTensors[] = {
    {&LayerWeights::attn_norm, {"attn_norm.weight", "input_layernorm.weight"}},
    {&LayerWeights::wq, {"attn_q.weight", "self_attn.q_proj.weight"}},
    {&LayerWeights::wk, {"attn_k.weight", "self_attn.k_proj.weight"}},
    {&LayerWeights::wv, {"attn_v.weight", "self_attn.v_proj.weight"}},
    {&LayerWeights::wo, {"attn_output.weight", "self_attn.o_proj.weight"}},
    {&LayerWeights::bq, {"attn_q.bias", "self_attn.q_proj.bias"}},
    {&LayerWeights::bk, {"attn_k.bias", "self_attn.k_proj.bias"}},
    {&LayerWeights::bv, {"attn_v.bias", "self_attn.v_proj.bias"}},
    {&LayerWeights::attn_q_norm, {"attn_q_norm.weight", "self_attn.q_norm.weight"}},
    {&LayerWeights::attn_k_norm, {"attn_k_norm.weight", "self_attn.k_norm.weight"}},
    {&LayerWeights::ffn_norm, {"ffn_norm.weight", "post_attention_layernorm.weight"}},
    {&LayerWeights::attn_post_norm, {"post_attention_norm.weight", nullptr}},
    {&LayerWeights::ffn_post_norm, {"post_ffw_norm.weight", "post_feedforward_layernorm.weight"}},
    {&LayerWeights::w_gate, {"ffn_gate.weight", "mlp.gate_proj.weight"}},
    {&LayerWeights::w_up, {"ffn_up.weight", "mlp.up_proj.weight"}},
    {&LayerWeights::w_down, {"ffn_down.weight", "mlp.down_proj.weight"}},
};

// The Hugging Face name of a layer tensor, or nullptr when the architecture has none. Gemma
// calls its attention post-norm post_attention_layernorm, the name Llama gives the FFN norm.
const char* hf_layer_name(const ModelConfig& config, const LayerTensor& t) {
  if (config.arch == "gemma2" || config.arch == "gemma3") {
    if (t.member == &LayerWeights::ffn_norm) return "pre_feedforward_layernorm.weight";
    if (t.member == &LayerWeights::attn_post_norm) return "post_attention_layernorm.weight";
  } else if (t.member == &LayerWeights::ffn_post_norm) {
    return nullptr;
  }
  return t.names.hf;
}

// Fills the views of `w` by name through `get` (an empty view for a missing tensor).
Status fill_views(const ModelConfig& config, bool hf, const TensorGetter& get, ModelWeights& w) {
  auto pick = [hf](const TensorNames& n) { return std::string(hf ? n.hf : n.gguf); };
  w.token_embd = get(pick(kEmbedding));
  w.output_norm = get(pick(kOutputNorm));
  w.output = config.tied_embeddings ? w.token_embd : get(pick(kOutput));
  w.layers.resize(static_cast<size_t>(config.n_layers));
  for (int l = 0; l < config.n_layers; ++l) {
    const std::string prefix = (hf ? "model.layers." : "blk.") + std::to_string(l) + ".";
    for (const LayerTensor& t : kLayerTensors) {
      const char* name = hf ? hf_layer_name(config, t) : t.names.gguf;
      if (name != nullptr) w.layers[l].*t.member = get(prefix + name);
    }
    if (config.moe.enabled()) KOI_RETURN_IF_ERROR(fill_moe_views(config, hf, l, get, w.layers[l].moe));
  }
  return ok_status();
}

// Rows [first, first + count) of the matrix t (its rows run along ne[1]): a view into the
// same storage, whatever the type (blocks never cross rows).
TensorView row_slice(const TensorView& t, int64_t first, int64_t count) {
  TensorView s = t;
  s.data = t.row(first);
  s.ne[1] = count;
  return s;
}

// Phi-3 stores Q, K and V as one matrix (attn_qkv / qkv_proj: Q rows, then K, then V) and the
// FFN gate and up as one (ffn_up / gate_up_proj: gate rows, then up), as llama.cpp's phi3
// architecture reads them; Koi splits each into views of the usual tensors. A GGUF file with
// separate attn_q/attn_k/attn_v keeps them.
template <typename Get>
Status split_fused_tensors(const ModelConfig& c, bool hf, Get&& get, ModelWeights& w) {
  if (c.arch != "phi3") return ok_status();
  auto fused = [&](const std::string& name, int64_t rows, const char* what) -> Result<TensorView> {
    TensorView t = get(name);
    if (t.data == nullptr) return Status::corrupt("tensor " + name + " is missing");
    if (t.n_dims != 2 || t.ne[0] != c.dim || t.ne[1] != rows) {
      return Status::corrupt(fmt::format("tensor {} has shape {} but the config implies [{}, {}] (hidden size, {})", name,
                                         t.shape_string(), c.dim, rows, what));
    }
    return t;
  };
  for (int l = 0; l < c.n_layers; ++l) {
    LayerWeights& L = w.layers[l];
    const std::string prefix = (hf ? "model.layers." : "blk.") + std::to_string(l) + ".";
    if (hf || L.wq.data == nullptr) {
      KOI_ASSIGN_OR_RETURN(TensorView qkv, fused(prefix + (hf ? "self_attn.qkv_proj.weight" : "attn_qkv.weight"),
                                                 c.q_dim() + 2LL * c.kv_dim(), "q_dim + 2 kv_dim"));
      L.wq = row_slice(qkv, 0, c.q_dim());
      L.wk = row_slice(qkv, c.q_dim(), c.kv_dim());
      L.wv = row_slice(qkv, c.q_dim() + c.kv_dim(), c.kv_dim());
    }
    KOI_ASSIGN_OR_RETURN(TensorView gate_up, fused(prefix + (hf ? "mlp.gate_up_proj.weight" : "ffn_up.weight"),
                                                   2LL * c.ffn_dim, "2 intermediate size"));
    L.w_gate = row_slice(gate_up, 0, c.ffn_dim);
    L.w_up = row_slice(gate_up, c.ffn_dim, c.ffn_dim);
  }
  return ok_status();
}

}  // namespace

ModelFormat detect_format(const std::string& path) {
  if (is_directory(path)) {
    return file_exists(path_join(path, "config.json")) ? ModelFormat::kHuggingFace : ModelFormat::kUnknown;
  }
  auto file = MappedFile::open(path);
  if (!file.ok() || file->size() < 4) return ModelFormat::kUnknown;
  if (std::memcmp(file->data(), kGgufMagic, 4) == 0) return ModelFormat::kGguf;
  // llama2.c has no magic: accept seven plausible int32 (only the vocabulary may be negative).
  if (file->size() < 28) return ModelFormat::kUnknown;
  int32_t h[7];
  std::memcpy(h, file->data(), sizeof h);
  for (int i = 0; i < 7; ++i) {
    int32_t v = i == 5 && h[i] < 0 ? -h[i] : h[i];
    if (v <= 0 || v > (1 << 24)) return ModelFormat::kUnknown;
  }
  return ModelFormat::kLlama2c;
}

Result<LoadedWeights> load_weights(const std::string& path) {
  switch (detect_format(path)) {
    case ModelFormat::kGguf: return load_gguf_weights(path);
    case ModelFormat::kHuggingFace: return load_hf_weights(path);
    case ModelFormat::kLlama2c:
      return Status::invalid_argument(path + ": not a GGUF file or a Hugging Face directory; if it is a llama2.c "
                                      "checkpoint, import it first: koi convert --llama2c " + path +
                                      " --tokenizer tokenizer.bin -o model.gguf");
    case ModelFormat::kUnknown: break;
  }
  if (!file_exists(path)) return Status::not_found(path + ": no such file or directory");
  if (is_directory(path)) {
    return Status::invalid_argument(path + ": directory has no config.json; expected a Hugging Face model directory");
  }
  return Status::invalid_argument(path + ": not a model file Koi recognises (expected GGUF or a Hugging Face directory)");
}

// The parts of Gemma 2 and 3 that every file implies: GeGLU, post-norms, sqrt(dim) embedding
// scale; Gemma 2 puts every other layer (the even ones) on the sliding window, Gemma 3 five
// of every six, and adds per-head Q/K norms and a rope base of its own for its local layers
// (10000 unless the file says otherwise).
void set_gemma_defaults(ModelConfig& c) {
  c.post_norms = true;
  c.ffn_activation = FfnActivation::kGeluTanh;
  c.embedding_scale = std::sqrt(static_cast<float>(c.dim));
  c.sliding_pattern = 2;
  if (c.arch == "gemma3") {
    c.sliding_pattern = 6;
    c.qk_norm = true;
    c.rope_local_theta = 10000.0f;
  }
}

// ---- GGUF -------------------------------------------------------------------------------

// "<arch>.attention.sliding_window", where the file has it (llama.cpp's key; Koi writes it for
// Mistral's llama files too, where llama.cpp ignores it).
Status window_from_gguf(const GgufFile& g, const std::string& arch, ModelConfig& c) {
  const std::string key = arch + ".attention.sliding_window";
  if (!g.has(key)) return ok_status();
  KOI_ASSIGN_OR_RETURN(int64_t v, g.get_int(key));
  KOI_ASSIGN_OR_RETURN(c.sliding_window, setting(g.path(), key, v, 0));
  return ok_status();
}

// Gemma 2's and 3's settings in llama.cpp's keys. The attention scale has no key llama.cpp
// reads for them: it uses 1/sqrt(head_dim), or 1/sqrt(dim / heads) for the 27B models (46
// layers of Gemma 2, 62 of Gemma 3: their query_pre_attn_scalar); Koi does the same unless
// the file has "<arch>.attention.scale", which Koi writes for other scales. Gemma 3's layer
// pattern (6) and local rope base (10000) are fixed in llama.cpp; Koi reads
// "gemma3.attention.sliding_window_pattern" and "gemma3.rope.freq_base_swa" where a file has
// them (Koi writes them only for other values).
Status gemma_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string& file = g.path();
  const std::string& a = c.arch;
  set_gemma_defaults(c);
  if (c.n_layers == (a == "gemma2" ? 46 : 62)) c.attn_scale = 1.0f / std::sqrt(static_cast<float>(c.dim / c.n_heads));
  for (auto [key, out] : {std::pair{a + ".attn_logit_softcapping", &c.attn_softcap},
                          std::pair{a + ".final_logit_softcapping", &c.final_softcap},
                          std::pair{a + ".attention.scale", &c.attn_scale},
                          std::pair{a + ".rope.freq_base_swa", &c.rope_local_theta}}) {
    if (!g.has(key)) continue;
    KOI_ASSIGN_OR_RETURN(double v, g.get_float(key));
    KOI_RETURN_IF_ERROR(positive(file, key, v));
    *out = static_cast<float>(v);
  }
  KOI_RETURN_IF_ERROR(window_from_gguf(g, a, c));
  if (const std::string key = a + ".attention.sliding_window_pattern"; g.has(key)) {
    KOI_ASSIGN_OR_RETURN(int64_t v, g.get_int(key));
    KOI_ASSIGN_OR_RETURN(c.sliding_pattern, setting(file, key, v, 0));
  }
  return ok_status();
}

// Rope settings beyond the base: "<arch>.rope.scaling.type" linear (with
// "<arch>.rope.scaling.factor"; on Gemma 3 only its global layers), and Phi-3's LongRoPE as
// llama.cpp stores it: the tensors rope_factors_long / rope_factors_short, the attention
// factor "<arch>.rope.scaling.attn_factor" and "<arch>.rope.scaling.original_context_length".
// Llama 3's "rope_freqs" tensor is read by config_from_gguf.
Status rope_scaling_from_gguf(const GgufFile& g, ModelConfig& c) {
  const std::string& file = g.path();
  const std::string& a = c.arch;
  if (const std::string key = a + ".rope.scaling.type"; g.has(key)) {
    KOI_ASSIGN_OR_RETURN(std::string type, g.get_string(key));
    if (type == "linear") {
      double factor = 1.0;
      if (g.has(a + ".rope.scaling.factor")) {
        KOI_ASSIGN_OR_RETURN(factor, g.get_float(a + ".rope.scaling.factor"));
      }
      KOI_RETURN_IF_ERROR(positive(file, a + ".rope.scaling.factor", factor));
      c.rope_scaling.enabled = factor != 1.0;
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = static_cast<float>(factor);
    } else if (type != "none") {
      return Status::unsupported(file + ": " + key + " '" + type + "' is not supported (Koi runs linear)");
    }
  }
  const GgufTensorInfo* long_factors = g.find_tensor("rope_factors_long.weight");
  const GgufTensorInfo* short_factors = g.find_tensor("rope_factors_short.weight");
  if (long_factors == nullptr && short_factors == nullptr) return ok_status();
  for (auto [t, name, out] : {std::tuple{long_factors, "rope_factors_long.weight", &c.rope_factors_long},
                              std::tuple{short_factors, "rope_factors_short.weight", &c.rope_factors_short}}) {
    if (t == nullptr) return Status::corrupt(file + ": " + name + " is missing (LongRoPE needs both factor sets)");
    if (t->view.type != DType::kF32) return Status::corrupt(file + ": " + name + " must be f32");
    out->assign(t->view.f32(), t->view.f32() + t->view.num_elements());
  }
  c.rope_original_context = c.max_seq_len;
  if (const std::string key = a + ".rope.scaling.original_context_length"; g.has(key)) {
    KOI_ASSIGN_OR_RETURN(int64_t v, g.get_int(key));
    KOI_ASSIGN_OR_RETURN(c.rope_original_context, setting(file, key, v));
  }
  if (const std::string key = a + ".rope.scaling.attn_factor"; g.has(key)) {
    KOI_ASSIGN_OR_RETURN(double v, g.get_float(key));
    KOI_RETURN_IF_ERROR(positive(file, key, v));
    c.rope_attn_factor = static_cast<float>(v);
  }
  return ok_status();
}

Result<ModelConfig> config_from_gguf(const GgufFile& g) {
  KOI_ASSIGN_OR_RETURN(std::string arch, g.get_string("general.architecture"));
  ModelConfig c;
  c.arch = family_of_gguf_architecture(arch);  // qwen2moe is qwen2 with experts
  if (c.arch != "llama" && c.arch != "qwen2" && c.arch != "qwen3" && c.arch != "gemma2" && c.arch != "gemma3" &&
      c.arch != "phi3") {
    return Status::unsupported(g.path() + ": architecture '" + arch +
                               "' is not supported; Koi runs GGUF architectures llama, qwen2, qwen3, gemma2, gemma3, "
                               "phi3, qwen2moe and qwen3moe");
  }
  const std::string& file = g.path();
  // An integer setting: required ones must be there, optional ones keep `fallback`.
  auto get_int = [&](const std::string& key, std::optional<int> fallback = std::nullopt) -> Result<int> {
    const std::string full = arch + "." + key;
    if (fallback && !g.has(full)) return *fallback;
    KOI_ASSIGN_OR_RETURN(int64_t v, g.get_int(full));
    return setting(file, full, v);
  };
  auto get_positive = [&](const std::string& key, float* out) -> Status {
    const std::string full = arch + "." + key;
    if (!g.has(full)) return ok_status();
    KOI_ASSIGN_OR_RETURN(double v, g.get_float(full));
    KOI_RETURN_IF_ERROR(positive(file, full, v));
    *out = static_cast<float>(v);
    return ok_status();
  };
  KOI_ASSIGN_OR_RETURN(c.dim, get_int("embedding_length"));
  KOI_ASSIGN_OR_RETURN(c.n_layers, get_int("block_count"));
  KOI_ASSIGN_OR_RETURN(c.ffn_dim, get_int("feed_forward_length"));
  KOI_ASSIGN_OR_RETURN(c.n_heads, get_int("attention.head_count"));
  KOI_ASSIGN_OR_RETURN(c.n_kv_heads, get_int("attention.head_count_kv", c.n_heads));
  KOI_ASSIGN_OR_RETURN(c.max_seq_len, get_int("context_length", c.max_seq_len));
  const bool head_dim_given = g.has(arch + ".attention.key_length");
  KOI_ASSIGN_OR_RETURN(c.head_dim, get_int("attention.key_length", c.dim / c.n_heads));
  KOI_RETURN_IF_ERROR(check_heads(file, {arch + ".embedding_length", arch + ".attention.head_count",
                                         arch + ".attention.head_count_kv", arch + ".attention.key_length"},
                                  c, head_dim_given));
  if (g.has(arch + ".rope.dimension_count")) {
    const std::string key = arch + ".rope.dimension_count";
    KOI_ASSIGN_OR_RETURN(int64_t rope_dim, g.get_int(key));
    if (rope_dim <= 0 || rope_dim % 2 != 0 || rope_dim > c.head_dim) {
      return Status::invalid_argument(fmt::format("{}: {} must be even, positive and at most the head dimension ({}), got {}",
                                                  file, key, c.head_dim, rope_dim));
    }
    if (rope_dim != c.head_dim) {
      return Status::unsupported(fmt::format("{}: {} is {} of a head dimension of {}; Koi rotates whole heads and does not "
                                             "run partial rotary embeddings",
                                             file, key, rope_dim, c.head_dim));
    }
  }
  KOI_RETURN_IF_ERROR(get_positive("attention.layer_norm_rms_epsilon", &c.norm_eps));
  KOI_RETURN_IF_ERROR(get_positive("rope.freq_base", &c.rope_theta));
  c.rope_style = c.arch == "llama" ? kernels::RopeStyle::kInterleaved : kernels::RopeStyle::kNeox;
  c.qkv_bias = c.arch == "qwen2";
  c.qk_norm = c.arch == "qwen3";
  if (c.arch == "gemma2" || c.arch == "gemma3") KOI_RETURN_IF_ERROR(gemma_from_gguf(g, c));
  if (arch == "llama" || arch == "phi3") KOI_RETURN_IF_ERROR(window_from_gguf(g, arch, c));  // every layer
  KOI_RETURN_IF_ERROR(rope_scaling_from_gguf(g, c));
  KOI_RETURN_IF_ERROR(moe_from_gguf(g, arch, c));
  const GgufTensorInfo* embd = g.find_tensor("token_embd.weight");
  if (embd == nullptr) return Status::corrupt(g.path() + ": tensor token_embd.weight is missing");
  KOI_ASSIGN_OR_RETURN(c.n_vocab, setting(file, "the rows of token_embd.weight (the vocabulary)", embd->view.ne[1]));
  c.tied_embeddings = g.find_tensor(kOutput.gguf) == nullptr;
  if (const GgufTensorInfo* rf = g.find_tensor("rope_freqs.weight")) {
    if (rf->view.type != DType::kF32) return Status::corrupt(g.path() + ": rope_freqs.weight must be f32");
    c.rope_factors.assign(rf->view.f32(), rf->view.f32() + rf->view.num_elements());
  }
  auto name = g.get_string("general.name");
  if (name.ok()) c.name = *name;
  if (Status s = c.validate(); !s.ok()) return s.with_prefix(g.path());
  return c;
}

Result<LoadedWeights> load_gguf_weights(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(GgufFile file, GgufFile::open(path));
  auto gguf = std::make_shared<const GgufFile>(std::move(file));
  KOI_ASSIGN_OR_RETURN(ModelConfig config, config_from_gguf(*gguf));
  LoadedWeights out;
  out.config = config;
  ModelWeights& w = out.weights;
  w.storage.push_back(gguf);
  if (!gguf->mapped_bytes().empty()) w.file_mappings.push_back(gguf->mapped_bytes());
  auto get = [&](const std::string& name) {
    const GgufTensorInfo* t = gguf->find_tensor(name);
    return t != nullptr ? t->view : TensorView{};
  };
  if (Status s = fill_views(config, /*hf=*/false, get, w); !s.ok()) return s.with_prefix(path);
  if (Status s = split_fused_tensors(config, /*hf=*/false, get, w); !s.ok()) return s.with_prefix(path);
  if (Status s = validate_weights(config, w); !s.ok()) return s.with_prefix(path);
  return out;
}

// ---- Hugging Face -----------------------------------------------------------------------

// An optional positive number of config.json: absent keeps *out, null turns it off (0).
Status optional_number(const json::object& o, const std::string& file_name, const char* key, float* out) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr) return ok_status();
  if (v->is_null()) {
    *out = 0.0f;  // off
    return ok_status();
  }
  if (!v->is_number()) return Status::invalid_argument(file_name + ": " + key + " must be a number, got " + json::serialize(*v));
  KOI_RETURN_IF_ERROR(positive(file_name, key, v->to_number<double>()));
  *out = static_cast<float>(v->to_number<double>());
  return ok_status();
}

// The activation of config.json's hidden_activation / hidden_act, which must be `want` (or
// its other spelling) where given.
Status check_activation(const json::object& o, const std::string& file_name, std::initializer_list<const char*> accepted,
                        const std::string& model) {
  for (const char* key : {"hidden_activation", "hidden_act"}) {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) continue;
    bool ok = false;
    for (const char* a : accepted) ok = ok || (v->is_string() && v->as_string() == a);
    if (!ok) {
      return Status::unsupported(file_name + ": " + key + " " + json::serialize(*v) + " is not supported; " + model +
                                 " runs with " + *accepted.begin());
    }
    break;
  }
  return ok_status();
}

// sliding_window: a number of positions (c.sliding_window), or null / absent for none.
Status window_from_hf(const json::object& o, const std::string& file_name, ModelConfig& c) {
  float window = static_cast<float>(c.sliding_window);
  KOI_RETURN_IF_ERROR(optional_number(o, file_name, "sliding_window", &window));
  if (window != std::floor(window) || window > static_cast<float>(kMaxSetting)) {
    return Status::invalid_argument(fmt::format("{}: sliding_window must be an integer from 1 to {}", file_name, kMaxSetting));
  }
  c.sliding_window = static_cast<int>(window);
  return ok_status();
}

// layer_types ("sliding_attention" / "full_attention" per layer), where given, must follow a
// repeating pattern c.sliding_pattern can say: Gemma 2's alternation, or for Gemma 3 the
// pattern its first full layer implies (every layer sliding when none is full).
Status layer_types_from_hf(const json::object& o, const std::string& file_name, ModelConfig& c) {
  const json::value* lt = o.if_contains("layer_types");
  if (lt == nullptr || lt->is_null()) return ok_status();
  const json::array* a = lt->if_array();
  if (a == nullptr || static_cast<int>(a->size()) != c.n_layers) {
    return Status::invalid_argument(file_name + ": layer_types must be a list of num_hidden_layers entries");
  }
  if (c.arch == "gemma3") {
    c.sliding_pattern = 0;
    for (int l = 0; l < c.n_layers && c.sliding_pattern == 0; ++l) {
      if ((*a)[l].is_string() && (*a)[l].as_string() == "full_attention") c.sliding_pattern = l + 1;
    }
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const bool sliding = c.sliding_pattern == 0 || l % c.sliding_pattern < c.sliding_pattern - 1;
    const char* want = sliding ? "sliding_attention" : "full_attention";
    if (!(*a)[l].is_string() || (*a)[l].as_string() != want) {
      return Status::unsupported(fmt::format("{}: layer_types[{}] is {}; Koi runs sliding layers in a repeating pattern "
                                             "(of {} layers here, so {} there)",
                                             file_name, l, json::serialize((*a)[l]), c.sliding_pattern, want));
    }
  }
  return ok_status();
}

// Gemma 2's and Gemma 3's settings in config.json: the activation must be the tanh GELU, the
// soft-caps may be null (off), query_pre_attn_scalar gives the attention scale; the sliding
// layers follow layer_types where given, else Gemma 2's alternation or Gemma 3's
// sliding_window_pattern; Gemma 3's local layers rotate with rope_local_base_freq. Absent
// fields take transformers' Gemma2Config / Gemma3TextConfig defaults (Gemma 3: no soft-caps).
Status gemma_from_hf(const json::object& o, const std::string& file_name, ModelConfig& c) {
  const bool gemma3 = c.arch == "gemma3";
  set_gemma_defaults(c);
  KOI_RETURN_IF_ERROR(check_activation(o, file_name, {"gelu_pytorch_tanh", "gelu_tanh"}, gemma3 ? "Gemma 3" : "Gemma 2"));
  c.attn_softcap = gemma3 ? 0.0f : 50.0f, c.final_softcap = gemma3 ? 0.0f : 30.0f;
  KOI_RETURN_IF_ERROR(optional_number(o, file_name, "attn_logit_softcapping", &c.attn_softcap));
  KOI_RETURN_IF_ERROR(optional_number(o, file_name, "final_logit_softcapping", &c.final_softcap));
  float scalar = 256.0f;
  KOI_RETURN_IF_ERROR(optional_number(o, file_name, "query_pre_attn_scalar", &scalar));
  if (scalar > 0.0f) c.attn_scale = 1.0f / std::sqrt(scalar);
  c.sliding_window = 4096;
  KOI_RETURN_IF_ERROR(window_from_hf(o, file_name, c));
  if (gemma3) {
    // EmbeddingGemma's encoder attends both ways; Koi runs causal decoders.
    if (const json::value* b = o.if_contains("use_bidirectional_attention"); b && b->is_bool() && b->as_bool()) {
      return Status::unsupported(file_name + ": use_bidirectional_attention is true; Koi runs causal decoders only");
    }
    KOI_RETURN_IF_ERROR(optional_number(o, file_name, "rope_local_base_freq", &c.rope_local_theta));
    float pattern = static_cast<float>(c.sliding_pattern);
    KOI_RETURN_IF_ERROR(optional_number(o, file_name, "sliding_window_pattern", &pattern));
    if (pattern != std::floor(pattern) || pattern > static_cast<float>(kMaxSetting)) {
      return Status::invalid_argument(file_name + ": sliding_window_pattern must be a positive integer");
    }
    c.sliding_pattern = static_cast<int>(pattern);
  }
  return layer_types_from_hf(o, file_name, c);
}

// Phi-3's settings in config.json: SiLU, sliding_window on every layer (null for none), and
// rope over whole heads (partial_rotary_factor 1, as Phi-3 and 3.5 have; Phi-4-mini's 0.75 is
// refused). Its LongRoPE rope_scaling is read with the other rope types.
Status phi3_from_hf(const json::object& o, const std::string& file_name, ModelConfig& c) {
  KOI_RETURN_IF_ERROR(check_activation(o, file_name, {"silu"}, "Phi-3"));
  if (const json::value* v = o.if_contains("partial_rotary_factor"); v && !v->is_null()) {
    if (!v->is_number() || v->to_number<double>() != 1.0) {
      return Status::unsupported(file_name + ": partial_rotary_factor " + json::serialize(*v) +
                                 " is not supported; Koi rotates whole heads (1.0)");
    }
  }
  c.sliding_pattern = 0;
  return window_from_hf(o, file_name, c);
}

// LongRoPE ("longrope", Phi-3's older "su"), as transformers' _compute_longrope_parameters
// reads it: short_factor and long_factor (head_dim/2 divisors each); the original context is
// the top-level original_max_position_embeddings (then the scale is max_position_embeddings
// over it), else that of rope_scaling with max_position_embeddings as the context;
// attention_factor, if not given, is sqrt(1 + ln(scale) / ln(original)) for a scale above 1.
Status longrope_from_hf(const json::object& o, const json::object& r, const std::string& file_name, ModelConfig& c) {
  for (auto [key, out] : {std::pair{"short_factor", &c.rope_factors_short}, std::pair{"long_factor", &c.rope_factors_long}}) {
    const std::string name = std::string("rope_scaling.") + key;
    const json::value* v = r.if_contains(key);
    if (v == nullptr || !v->is_array() || static_cast<int>(v->as_array().size()) != c.head_dim / 2) {
      return Status::invalid_argument(fmt::format("{}: {} must be a list of head_dim/2 = {} numbers", file_name, name,
                                                  c.head_dim / 2));
    }
    for (const json::value& f : v->as_array()) {
      if (!f.is_number()) return Status::invalid_argument(file_name + ": " + name + " holds " + json::serialize(f));
      KOI_RETURN_IF_ERROR(positive(file_name, name, f.to_number<double>()));
      out->push_back(static_cast<float>(f.to_number<double>()));
    }
  }
  double original = c.max_seq_len, scale = 1.0;
  const json::value* top = o.if_contains("original_max_position_embeddings");
  if (top != nullptr && top->is_number()) {
    original = top->to_number<double>();
    scale = c.max_seq_len / original;
  } else {
    const json::value* inner = r.if_contains("original_max_position_embeddings");
    if (inner != nullptr && inner->is_number()) original = inner->to_number<double>();
    const json::value* factor = r.if_contains("factor");
    if (factor != nullptr && factor->is_number()) scale = factor->to_number<double>();
  }
  if (!(original >= 1.0) || original != std::floor(original) || original > static_cast<double>(kMaxSetting)) {
    return Status::invalid_argument(fmt::format("{}: original_max_position_embeddings must be an integer from 1 to {}",
                                                file_name, kMaxSetting));
  }
  c.rope_original_context = static_cast<int>(original);
  c.rope_attn_factor = 1.0f;
  if (scale > 1.0 && original > 1.0) {
    c.rope_attn_factor = static_cast<float>(std::sqrt(1.0 + std::log(scale) / std::log(original)));
  }
  if (const json::value* af = r.if_contains("attention_factor"); af && !af->is_null()) {
    if (!af->is_number()) {
      return Status::invalid_argument(file_name + ": rope_scaling.attention_factor must be a number, got " + json::serialize(*af));
    }
    KOI_RETURN_IF_ERROR(positive(file_name, "rope_scaling.attention_factor", af->to_number<double>()));
    c.rope_attn_factor = static_cast<float>(af->to_number<double>());
  }
  return ok_status();
}

Result<ModelConfig> parse_hf_config(const std::string& text, const std::string& file_name) {
  boost::system::error_code ec;
  json::value root = json::parse(text, ec);
  if (ec || !root.is_object()) {
    return Status::corrupt(file_name + ": not valid JSON" + (ec ? " (" + ec.message() + ")" : ""));
  }
  const json::object& o = root.as_object();
  auto num = [&](const char* key) -> std::optional<double> {
    const json::value* v = o.if_contains(key);
    if (v == nullptr || v->is_null()) return std::nullopt;
    if (v->is_int64()) return static_cast<double>(v->as_int64());
    if (v->is_uint64()) return static_cast<double>(v->as_uint64());
    if (v->is_double()) return v->as_double();
    return std::nullopt;
  };
  // An integer setting, range-checked before it is narrowed; `fallback` when it is absent.
  auto integer = [&](const char* key, std::optional<int> fallback = std::nullopt) -> Result<int> {
    const json::value* v = o.if_contains(key);
    if ((v == nullptr || v->is_null()) && fallback) return *fallback;
    auto n = num(key);
    if (!n) return Status::corrupt(file_name + ": missing or non-numeric field \"" + std::string(key) + "\"");
    if (*n != std::floor(*n) || std::fabs(*n) > 9e18) {
      return Status::invalid_argument(file_name + ": " + key + " must be an integer, got " + json::serialize(*v));
    }
    return setting(file_name, key, static_cast<int64_t>(*n));
  };
  auto real = [&](const char* key, double fallback, float* out) -> Status {
    const json::value* v = o.if_contains(key);
    if (v != nullptr && !v->is_null() && !num(key)) {
      return Status::invalid_argument(file_name + ": " + key + " must be a number, got " + json::serialize(*v));
    }
    const double x = num(key).value_or(fallback);
    KOI_RETURN_IF_ERROR(positive(file_name, key, x));
    *out = static_cast<float>(x);
    return ok_status();
  };
  ModelConfig c;
  std::string arch_name;
  if (const json::value* a = o.if_contains("architectures"); a && a->is_array() && !a->as_array().empty() &&
                                                             a->as_array()[0].is_string()) {
    arch_name = std::string(a->as_array()[0].as_string());
  } else if (const json::value* mt = o.if_contains("model_type"); mt && mt->is_string()) {
    arch_name = std::string(mt->as_string());
  }
  if (arch_name == "LlamaForCausalLM" || arch_name == "MistralForCausalLM" || arch_name == "llama" ||
      arch_name == "mistral" || arch_name == "MixtralForCausalLM" || arch_name == "mixtral") {
    c.arch = "llama";
  } else if (arch_name == "Qwen2ForCausalLM" || arch_name == "qwen2" || arch_name == "Qwen2MoeForCausalLM" ||
             arch_name == "qwen2_moe") {
    c.arch = "qwen2";
    c.qkv_bias = true;
  } else if (arch_name == "Qwen3ForCausalLM" || arch_name == "qwen3" || arch_name == "Qwen3MoeForCausalLM" ||
             arch_name == "qwen3_moe") {
    c.arch = "qwen3";
    c.qk_norm = true;
  } else if (arch_name == "Gemma2ForCausalLM" || arch_name == "gemma2") {
    c.arch = "gemma2";
  } else if (arch_name == "Gemma3ForCausalLM" || arch_name == "gemma3_text") {
    c.arch = "gemma3";
  } else if (arch_name == "Phi3ForCausalLM" || arch_name == "phi3") {
    c.arch = "phi3";
  } else {
    return Status::unsupported(file_name + ": architecture '" + arch_name +
                               "' is not supported; Koi runs LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, "
                               "Qwen3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (text), Phi3ForCausalLM, "
                               "MixtralForCausalLM, Qwen2MoeForCausalLM and Qwen3MoeForCausalLM");
  }
  const bool mistral = arch_name == "MistralForCausalLM" || arch_name == "mistral";
  KOI_ASSIGN_OR_RETURN(c.dim, integer("hidden_size"));
  KOI_ASSIGN_OR_RETURN(c.n_layers, integer("num_hidden_layers"));
  KOI_ASSIGN_OR_RETURN(c.n_heads, integer("num_attention_heads"));
  KOI_ASSIGN_OR_RETURN(c.ffn_dim, integer("intermediate_size"));
  KOI_ASSIGN_OR_RETURN(c.n_vocab, integer("vocab_size"));
  KOI_ASSIGN_OR_RETURN(c.n_kv_heads, integer("num_key_value_heads", c.n_heads));
  const bool head_dim_given = num("head_dim").has_value();
  KOI_ASSIGN_OR_RETURN(c.head_dim, integer("head_dim", c.dim / c.n_heads));
  KOI_ASSIGN_OR_RETURN(c.max_seq_len, integer("max_position_embeddings", 2048));
  KOI_RETURN_IF_ERROR(check_heads(file_name, {"hidden_size", "num_attention_heads", "num_key_value_heads", "head_dim"}, c,
                                  head_dim_given));
  KOI_RETURN_IF_ERROR(real("rms_norm_eps", 1e-6, &c.norm_eps));
  KOI_RETURN_IF_ERROR(real("rope_theta", 10000.0, &c.rope_theta));
  if (const json::value* b = o.if_contains("attention_bias"); b && b->is_bool() && b->as_bool()) c.qkv_bias = true;
  if (const json::value* t = o.if_contains("tie_word_embeddings"); t && t->is_bool()) c.tied_embeddings = t->as_bool();
  if (c.arch == "gemma2" || c.arch == "gemma3") KOI_RETURN_IF_ERROR(gemma_from_hf(o, file_name, c));
  if (c.arch == "phi3") KOI_RETURN_IF_ERROR(phi3_from_hf(o, file_name, c));
  if (mistral) KOI_RETURN_IF_ERROR(window_from_hf(o, file_name, c));  // every layer (sliding_pattern 0)
  if (is_moe_hf_architecture(arch_name)) KOI_RETURN_IF_ERROR(moe_from_hf(o, arch_name, file_name, c));
  // Qwen2/Qwen3 configs carry sliding_window but only use it with use_sliding_window: true,
  // which Koi does not run; refusing beats silently attending to the whole context.
  if (const json::value* sw = o.if_contains("use_sliding_window"); sw && sw->is_bool() && sw->as_bool()) {
    return Status::unsupported(file_name + ": use_sliding_window is true; Koi does not run sliding-window attention");
  }
  c.rope_style = kernels::RopeStyle::kNeox;
  if (const json::value* rs = o.if_contains("rope_scaling"); rs && rs->is_object()) {
    const json::object& r = rs->as_object();
    std::string type;
    for (const char* k : {"rope_type", "type"}) {
      if (const json::value* v = r.if_contains(k); v && v->is_string()) type = std::string(v->as_string());
    }
    // A rope_scaling number, which must be there as a number if given, and > 0.
    auto rnum = [&](const char* key, double def) -> Result<double> {
      const json::value* v = r.if_contains(key);
      if (v == nullptr) return def;
      const std::string name = std::string("rope_scaling.") + key;
      if (!v->is_number()) return Status::invalid_argument(file_name + ": " + name + " must be a number, got " + json::serialize(*v));
      KOI_RETURN_IF_ERROR(positive(file_name, name, v->to_number<double>()));
      return v->to_number<double>();
    };
    if (type == "llama3") {
      RopeScaling& rs = c.rope_scaling;
      rs.enabled = true;
      KOI_ASSIGN_OR_RETURN(double factor, rnum("factor", 8.0));
      KOI_ASSIGN_OR_RETURN(double low, rnum("low_freq_factor", 1.0));
      KOI_ASSIGN_OR_RETURN(double high, rnum("high_freq_factor", 4.0));
      KOI_ASSIGN_OR_RETURN(double original, rnum("original_max_position_embeddings", 8192));
      if (!(high > low)) {
        return Status::invalid_argument(fmt::format("{}: rope_scaling.high_freq_factor ({}) must be greater than "
                                                    "rope_scaling.low_freq_factor ({})", file_name, high, low));
      }
      if (original != std::floor(original) || original > static_cast<double>(kMaxSetting)) {
        return Status::invalid_argument(fmt::format("{}: rope_scaling.original_max_position_embeddings must be an integer from "
                                                    "1 to {}, got {}", file_name, kMaxSetting, original));
      }
      rs.factor = static_cast<float>(factor), rs.low_freq_factor = static_cast<float>(low);
      rs.high_freq_factor = static_cast<float>(high), rs.original_max_position = static_cast<int>(original);
    } else if (type == "linear") {
      KOI_ASSIGN_OR_RETURN(double factor, rnum("factor", 1.0));
      c.rope_scaling.enabled = factor != 1.0;
      c.rope_scaling.type = RopeScaling::Type::kLinear;
      c.rope_scaling.factor = static_cast<float>(factor);
    } else if (type == "longrope" || type == "su") {
      KOI_RETURN_IF_ERROR(longrope_from_hf(o, r, file_name, c));
    } else if (!type.empty() && type != "default") {
      return Status::unsupported(file_name + ": rope_scaling type '" + type +
                                 "' is not supported (Koi runs llama3, linear and longrope)");
    }
  }
  if (Status s = c.validate(); !s.ok()) return s.with_prefix(file_name);
  return c;
}

Result<LoadedWeights> load_hf_weights(const std::string& dir) {
  const std::string config_path = path_join(dir, "config.json");
  KOI_ASSIGN_OR_RETURN(std::string config_text, read_file(config_path));
  KOI_ASSIGN_OR_RETURN(ModelConfig config, parse_hf_config(config_text, config_path));
  KOI_ASSIGN_OR_RETURN(SafetensorsModel st, SafetensorsModel::open_dir(dir));
  auto model = std::make_shared<const SafetensorsModel>(std::move(st));
  if (model->find(kOutput.hf) == nullptr) config.tied_embeddings = true;
  LoadedWeights out;
  out.config = config;
  ModelWeights& w = out.weights;
  w.storage.push_back(model);
  for (std::span<const uint8_t> shard : model->mapped_bytes()) {
    if (!shard.empty()) w.file_mappings.push_back(shard);
  }
  auto get = [&](const std::string& name) {
    const SafetensorsTensor* t = model->find(name);
    return t != nullptr ? t->view : TensorView{};
  };
  KOI_RETURN_IF_ERROR(fill_views(config, /*hf=*/true, get, w));
  if (Status s = split_fused_tensors(config, /*hf=*/true, get, w); !s.ok()) return s.with_prefix(dir);
  // Norms and biases must be f32 for the forward pass; HF checkpoints often store them in
  // bf16/f16, so those small vectors are converted into owned f32 copies.
  auto to_f32 = [&](TensorView& t) {
    if (t.data == nullptr || t.type == DType::kF32) return;
    std::vector<float> f(static_cast<size_t>(t.num_elements()));
    dequantize_row(t.type, t.data, f.data(), t.num_elements());
    t.type = DType::kF32;
    t.data = w.own(std::move(f));
  };
  // Gemma's RMSNorm multiplies by (1 + weight); Koi stores the factor, as llama.cpp does.
  auto plus_one = [&](TensorView& t) {
    if (t.data == nullptr) return;
    std::vector<float> f(t.f32(), t.f32() + t.num_elements());
    for (float& x : f) x += 1.0f;
    t.data = w.own(std::move(f));
  };
  to_f32(w.output_norm);
  for (LayerWeights& L : w.layers) {
    for (TensorView* t : {&L.attn_norm, &L.ffn_norm, &L.bq, &L.bk, &L.bv, &L.attn_q_norm, &L.attn_k_norm,
                          &L.attn_post_norm, &L.ffn_post_norm, &L.moe.shared_gate_inp}) {
      to_f32(*t);
    }
  }
  if (config.arch == "gemma2" || config.arch == "gemma3") {
    plus_one(w.output_norm);
    for (LayerWeights& L : w.layers) {
      for (TensorView* t : {&L.attn_norm, &L.ffn_norm, &L.attn_post_norm, &L.ffn_post_norm, &L.attn_q_norm, &L.attn_k_norm}) {
        plus_one(*t);
      }
    }
  }
  if (Status s = validate_weights(config, w); !s.ok()) return s.with_prefix(dir);
  return out;
}

}  // namespace koi::model
