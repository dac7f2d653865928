#include "model/moe.h"

#include <boost/json.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/llama.h"

namespace koi::model {
namespace {

namespace json = boost::json;

void ensure(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
}

// The largest expert count or width read from a file (as the loader's settings).
constexpr int64_t kMaxSetting = int64_t{1} << 24;

// An integer field of config.json: `fallback` when absent or null, else an integer in [min, 2^24].
Result<int> hf_int(const json::object& o, const char* key, int fallback, int min, const std::string& file) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_int64() || v->as_int64() < min || v->as_int64() > kMaxSetting) {
    return Status::invalid_argument(fmt::format("{}: {} must be an integer from {} to {}, got {}", file, key, min,
                                                kMaxSetting, json::serialize(*v)));
  }
  return static_cast<int>(v->as_int64());
}

Result<bool> hf_bool(const json::object& o, const char* key, bool fallback, const std::string& file) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || v->is_null()) return fallback;
  if (!v->is_bool()) return Status::invalid_argument(file + ": " + key + " must be true or false, got " + json::serialize(*v));
  return v->as_bool();
}

}  // namespace

void route_token(const MoeConfig& moe, const float* logits, float* probs, int32_t* experts, float* weights) {
  const int E = moe.n_experts, K = moe.n_experts_used;
  std::copy_n(logits, E, probs);
  kernels::softmax(probs, E);
  float sum = 0.0f;
  for (int slot = 0; slot < K; ++slot) {
    int best = -1;
    for (int e = 0; e < E; ++e) {
      if (std::find(experts, experts + slot, e) != experts + slot) continue;
      if (best < 0 || probs[e] > probs[best]) best = e;  // strict: ties go to the lower index
    }
    experts[slot] = best;
    weights[slot] = probs[best];
    sum += probs[best];
  }
  if (moe.norm_topk_prob) {
    for (int slot = 0; slot < K; ++slot) weights[slot] /= sum;
  }
}

// logits (T, E) = xn W_router^T; per token its k experts and weights. Then per expert e, the
// rows routed to it (in token order) are gathered, run through e's SwiGLU and written to
// their (token, slot) rows of slot_out (T*k, dim); each token then sums its slots in order.
void MoeFfn::forward(const ModelConfig& c, const MoeLayerWeights& w, const float* xn, float* out, int64_t T,
                     ThreadPool* pool) {
  const MoeConfig& m = c.moe;
  const int64_t E = m.n_experts, K = m.n_experts_used, F = m.expert_ffn_dim, dim = c.dim;
  ensure(logits_, T * E);
  ensure(probs_, T * E);
  ensure(weights_, T * K);
  ensure(slot_out_, T * K * dim);
  experts_.resize(static_cast<size_t>(T * K));
  kernels::matmul(w.router, xn, logits_.data(), T, pool);
  for (int64_t t = 0; t < T; ++t) {
    route_token(m, logits_.data() + t * E, probs_.data() + t * E, experts_.data() + t * K, weights_.data() + t * K);
  }
  for (int32_t e = 0; e < E; ++e) {
    routed_.clear();
    for (int64_t i = 0; i < T * K; ++i) {
      if (experts_[i] == e) routed_.push_back(static_cast<int32_t>(i));
    }
    const int64_t n = static_cast<int64_t>(routed_.size());
    if (n == 0) continue;
    ensure(rows_in_, n * dim);
    ensure(gate_, n * F);
    ensure(up_, n * F);
    ensure(rows_out_, n * dim);
    for (int64_t r = 0; r < n; ++r) std::copy_n(xn + (routed_[r] / K) * dim, dim, rows_in_.data() + r * dim);
    kernels::matmul(w.gate[e], rows_in_.data(), gate_.data(), n, pool);
    kernels::matmul(w.up[e], rows_in_.data(), up_.data(), n, pool);
    kernels::silu_mul(gate_.data(), up_.data(), n * F);
    kernels::matmul(w.down[e], gate_.data(), rows_out_.data(), n, pool);
    for (int64_t r = 0; r < n; ++r) std::copy_n(rows_out_.data() + r * dim, dim, slot_out_.data() + routed_[r] * dim);
  }
  std::fill_n(out, T * dim, 0.0f);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t slot = 0; slot < K; ++slot) {
      kernels::axpy(weights_[t * K + slot], slot_out_.data() + (t * K + slot) * dim, out + t * dim, dim);
    }
  }
  if (m.shared_ffn_dim == 0) return;
  // Qwen2-MoE's shared expert: out += sigmoid(s . xn) * down(silu(gate xn) * up xn)   (T, Fs)
  const int64_t Fs = m.shared_ffn_dim;
  ensure(gate_, T * Fs);
  ensure(up_, T * Fs);
  ensure(shared_, T * dim);
  kernels::matmul(w.shared_gate, xn, gate_.data(), T, pool);
  kernels::matmul(w.shared_up, xn, up_.data(), T, pool);
  kernels::silu_mul(gate_.data(), up_.data(), T * Fs);
  kernels::matmul(w.shared_down, gate_.data(), shared_.data(), T, pool);
  for (int64_t t = 0; t < T; ++t) {
    float s = kernels::dot(w.shared_gate_inp.f32(), xn + t * dim, dim);
    kernels::sigmoid(&s, &s, 1);
    kernels::axpy(s, shared_.data() + t * dim, out + t * dim, dim);
  }
}

Status validate_moe_config(const MoeConfig& m) {
  auto bad = [](const std::string& what) { return Status::invalid_argument("model config: " + what); };
  if (m.n_experts < 0) return bad("expert count must not be negative, got " + std::to_string(m.n_experts));
  if (!m.enabled()) {
    if (m.shared_ffn_dim != 0) return bad("a shared expert needs routed experts (expert count is 0)");
    return ok_status();
  }
  if (m.n_experts_used < 1 || m.n_experts_used > m.n_experts) {
    return bad(fmt::format("experts used per token ({}) must be from 1 to the expert count ({})", m.n_experts_used,
                           m.n_experts));
  }
  if (m.expert_ffn_dim <= 0) return bad("expert feed-forward size must be positive, got " + std::to_string(m.expert_ffn_dim));
  if (m.shared_ffn_dim < 0) return bad("shared expert size must not be negative, got " + std::to_string(m.shared_ffn_dim));
  return ok_status();
}

Status validate_moe_weights(const ModelConfig& c, const MoeLayerWeights& w, const std::string& p) {
  const MoeConfig& m = c.moe;
  const int64_t E = m.n_experts, F = m.expert_ffn_dim, dim = c.dim;
  KOI_RETURN_IF_ERROR(check_tensor(w.router, p + "ffn_gate_inp", {dim, E}, false));
  for (const auto& [views, name, shape] :
       {std::tuple{&w.gate, "ffn_gate_exps", std::pair{dim, F}}, std::tuple{&w.up, "ffn_up_exps", std::pair{dim, F}},
        std::tuple{&w.down, "ffn_down_exps", std::pair{F, dim}}}) {
    if (static_cast<int64_t>(views->size()) != E) {
      return Status::corrupt(fmt::format("tensor {}{} has {} experts, the config says {}", p, name, views->size(), E));
    }
    for (int64_t e = 0; e < E; ++e) {
      KOI_RETURN_IF_ERROR(check_tensor((*views)[e], fmt::format("{}{}[{}]", p, name, e), {shape.first, shape.second}, false));
    }
  }
  if (m.shared_ffn_dim == 0) return ok_status();
  const int64_t Fs = m.shared_ffn_dim;
  if (w.shared_gate_inp.data == nullptr || w.shared_gate_inp.num_elements() != dim ||
      w.shared_gate_inp.type != DType::kF32) {
    return Status::corrupt(fmt::format("tensor {}ffn_gate_inp_shexp must be f32 [{}] (the shared expert's gate)", p, dim));
  }
  KOI_RETURN_IF_ERROR(check_tensor(w.shared_gate, p + "ffn_gate_shexp", {dim, Fs}, false));
  KOI_RETURN_IF_ERROR(check_tensor(w.shared_up, p + "ffn_up_shexp", {dim, Fs}, false));
  return check_tensor(w.shared_down, p + "ffn_down_shexp", {Fs, dim}, false);
}

int64_t moe_layer_parameters(const ModelConfig& c) {
  const MoeConfig& m = c.moe;
  int64_t n = int64_t{c.dim} * m.n_experts + 3LL * m.n_experts * c.dim * m.expert_ffn_dim;
  if (m.shared_ffn_dim > 0) n += c.dim + 3LL * c.dim * m.shared_ffn_dim;
  return n;
}

std::string gguf_architecture(const ModelConfig& c) {
  if (c.moe.enabled() && (c.arch == "qwen2" || c.arch == "qwen3")) return c.arch + "moe";
  return c.arch;
}

std::string family_of_gguf_architecture(const std::string& a) {
  if (a == "qwen2moe") return "qwen2";
  if (a == "qwen3moe") return "qwen3";
  return a;
}

bool is_moe_hf_architecture(const std::string& n) {
  return n == "MixtralForCausalLM" || n == "mixtral" || n == "Qwen2MoeForCausalLM" || n == "qwen2_moe" ||
         n == "Qwen3MoeForCausalLM" || n == "qwen3_moe";
}

// Transformers' MixtralConfig, Qwen2MoeConfig and Qwen3MoeConfig field names and defaults.
Status moe_from_hf(const json::object& o, const std::string& hf_arch, const std::string& file, ModelConfig& c) {
  MoeConfig& m = c.moe;
  if (hf_arch == "MixtralForCausalLM" || hf_arch == "mixtral") {
    KOI_ASSIGN_OR_RETURN(m.n_experts, hf_int(o, "num_local_experts", 8, 1, file));
    KOI_ASSIGN_OR_RETURN(m.n_experts_used, hf_int(o, "num_experts_per_tok", 2, 1, file));
    m.expert_ffn_dim = c.ffn_dim;
    m.norm_topk_prob = true;
    return ok_status();
  }
  const bool qwen2 = hf_arch == "Qwen2MoeForCausalLM" || hf_arch == "qwen2_moe";
  KOI_ASSIGN_OR_RETURN(m.n_experts, hf_int(o, "num_experts", qwen2 ? 60 : 128, 1, file));
  KOI_ASSIGN_OR_RETURN(m.n_experts_used, hf_int(o, "num_experts_per_tok", qwen2 ? 4 : 8, 1, file));
  KOI_ASSIGN_OR_RETURN(m.expert_ffn_dim, hf_int(o, "moe_intermediate_size", qwen2 ? 1408 : 768, 1, file));
  KOI_ASSIGN_OR_RETURN(m.norm_topk_prob, hf_bool(o, "norm_topk_prob", false, file));
  if (qwen2) {
    KOI_ASSIGN_OR_RETURN(m.shared_ffn_dim, hf_int(o, "shared_expert_intermediate_size", 5632, 0, file));
  }
  KOI_ASSIGN_OR_RETURN(int sparse_step, hf_int(o, "decoder_sparse_step", 1, 1, file));
  const json::value* dense = o.if_contains("mlp_only_layers");
  const bool has_dense = dense != nullptr && dense->is_array() && !dense->as_array().empty();
  if (sparse_step != 1 || has_dense) {
    return Status::unsupported(file + ": decoder_sparse_step / mlp_only_layers make some layers dense; Koi runs MoE "
                                      "models whose every layer is sparse (decoder_sparse_step 1, mlp_only_layers [])");
  }
  return ok_status();
}

// llama.cpp's keys: {arch}.expert_count, expert_used_count, expert_feed_forward_length
// (Qwen; Mixtral's experts are feed_forward_length wide), expert_shared_feed_forward_length
// (Qwen2-MoE) and expert_weights_norm (newer files; otherwise llama.cpp's per-architecture
// choice: renormalised for llama and qwen3moe, not for qwen2moe).
Status moe_from_gguf(const GgufFile& g, const std::string& a, ModelConfig& c) {
  const bool qwen_moe = a == "qwen2moe" || a == "qwen3moe";
  if (!g.has(a + ".expert_count")) {
    if (qwen_moe) return Status::corrupt(g.path() + ": " + a + ".expert_count is missing");
    return ok_status();
  }
  auto get = [&](const std::string& key, int fallback) -> Result<int> {
    const std::string full = a + "." + key;
    if (!g.has(full)) return fallback;
    KOI_ASSIGN_OR_RETURN(int64_t v, g.get_int(full));
    if (v < 0 || v > kMaxSetting) {
      return Status::invalid_argument(fmt::format("{}: {} must be from 0 to {}, got {}", g.path(), full, kMaxSetting, v));
    }
    return static_cast<int>(v);
  };
  MoeConfig& m = c.moe;
  KOI_ASSIGN_OR_RETURN(m.n_experts, get("expert_count", 0));
  if (m.n_experts == 0) return ok_status();
  KOI_ASSIGN_OR_RETURN(m.n_experts_used, get("expert_used_count", 0));
  KOI_ASSIGN_OR_RETURN(m.expert_ffn_dim, get("expert_feed_forward_length", c.ffn_dim));
  int shared = 0;
  if (const GgufTensorInfo* t = g.find_tensor("blk.0.ffn_gate_shexp.weight")) shared = static_cast<int>(t->view.ne[1]);
  KOI_ASSIGN_OR_RETURN(m.shared_ffn_dim, get("expert_shared_feed_forward_length", shared));
  m.norm_topk_prob = a != "qwen2moe";
  if (g.has(a + ".expert_weights_norm")) {
    KOI_ASSIGN_OR_RETURN(m.norm_topk_prob, g.get_bool(a + ".expert_weights_norm"));
  }
  return ok_status();
}

MoeHfNames moe_hf_names(const ModelConfig& c, int layer) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  const bool mixtral = c.arch == "llama";
  MoeHfNames n;
  n.router = p + (mixtral ? "block_sparse_moe.gate.weight" : "mlp.gate.weight");
  for (int e = 0; e < c.moe.n_experts; ++e) {
    const std::string ep = p + (mixtral ? "block_sparse_moe.experts." : "mlp.experts.") + std::to_string(e) + ".";
    n.gate.push_back(ep + (mixtral ? "w1.weight" : "gate_proj.weight"));
    n.up.push_back(ep + (mixtral ? "w3.weight" : "up_proj.weight"));
    n.down.push_back(ep + (mixtral ? "w2.weight" : "down_proj.weight"));
  }
  if (c.moe.shared_ffn_dim > 0) {
    n.shared_gate_inp = p + "mlp.shared_expert_gate.weight";
    n.shared_gate = p + "mlp.shared_expert.gate_proj.weight";
    n.shared_up = p + "mlp.shared_expert.up_proj.weight";
    n.shared_down = p + "mlp.shared_expert.down_proj.weight";
  }
  return n;
}

Status fill_moe_views(const ModelConfig& c, bool hf, int layer, const TensorGetter& get, MoeLayerWeights& w) {
  const MoeConfig& m = c.moe;
  if (hf) {
    const MoeHfNames n = moe_hf_names(c, layer);
    w.router = get(n.router);
    for (int e = 0; e < m.n_experts; ++e) {
      w.gate.push_back(get(n.gate[e]));
      w.up.push_back(get(n.up[e]));
      w.down.push_back(get(n.down[e]));
    }
    if (m.shared_ffn_dim > 0) {
      w.shared_gate_inp = get(n.shared_gate_inp);
      w.shared_gate = get(n.shared_gate);
      w.shared_up = get(n.shared_up);
      w.shared_down = get(n.shared_down);
    }
    return ok_status();
  }
  const std::string prefix = "blk." + std::to_string(layer) + ".";
  w.router = get(prefix + "ffn_gate_inp.weight");
  const int64_t E = m.n_experts, F = m.expert_ffn_dim, dim = c.dim;
  for (const auto& [views, name, in, out] :
       {std::tuple{&w.gate, "ffn_gate_exps", dim, F}, std::tuple{&w.up, "ffn_up_exps", dim, F},
        std::tuple{&w.down, "ffn_down_exps", F, dim}}) {
    const TensorView t = get(prefix + name + ".weight");
    views->assign(static_cast<size_t>(E), TensorView{});
    if (t.data == nullptr) continue;
    if (t.n_dims != 3 || t.ne[0] != in || t.ne[1] != out || t.ne[2] != E) {
      return Status::corrupt(fmt::format("tensor {}{}.weight has shape {} but the config implies [{}, {}, {}]", prefix,
                                         name, t.shape_string(), in, out, E));
    }
    for (int64_t e = 0; e < E; ++e) (*views)[e] = make_view(t.type, {in, out}, t.row(e * out));
  }
  w.shared_gate_inp = get(prefix + "ffn_gate_inp_shexp.weight");
  w.shared_gate = get(prefix + "ffn_gate_shexp.weight");
  w.shared_up = get(prefix + "ffn_up_shexp.weight");
  w.shared_down = get(prefix + "ffn_down_shexp.weight");
  return ok_status();
}

void add_moe_hf_config(const ModelConfig& c, json::object& o) {
  const MoeConfig& m = c.moe;
  o["num_experts_per_tok"] = m.n_experts_used;
  if (c.arch == "llama") {
    o["architectures"] = json::array{"MixtralForCausalLM"};
    o["model_type"] = "mixtral";
    o["num_local_experts"] = m.n_experts;
    o["intermediate_size"] = m.expert_ffn_dim;
    return;
  }
  const bool qwen2 = c.arch == "qwen2";
  o["architectures"] = json::array{qwen2 ? "Qwen2MoeForCausalLM" : "Qwen3MoeForCausalLM"};
  o["model_type"] = qwen2 ? "qwen2_moe" : "qwen3_moe";
  o["num_experts"] = m.n_experts;
  o["moe_intermediate_size"] = m.expert_ffn_dim;
  o["norm_topk_prob"] = m.norm_topk_prob;
  o["decoder_sparse_step"] = 1;
  o["mlp_only_layers"] = json::array{};
  if (qwen2) o["shared_expert_intermediate_size"] = m.shared_ffn_dim;
}

void add_moe_metadata(const ModelConfig& c, const std::string& a, GgufWriter& writer) {
  const MoeConfig& m = c.moe;
  writer.set_u32(a + ".expert_count", static_cast<uint32_t>(m.n_experts));
  writer.set_u32(a + ".expert_used_count", static_cast<uint32_t>(m.n_experts_used));
  writer.set_u32(a + ".expert_feed_forward_length", static_cast<uint32_t>(m.expert_ffn_dim));
  if (m.shared_ffn_dim > 0) {
    writer.set_u32(a + ".expert_shared_feed_forward_length", static_cast<uint32_t>(m.shared_ffn_dim));
  }
  writer.set_bool(a + ".expert_weights_norm", m.norm_topk_prob);
}

// The router stays f32, as llama.cpp's quantizer leaves ffn_gate_inp; the shared gate is
// written 1-D {dim}, as llama.cpp reads ffn_gate_inp_shexp.
void add_moe_tensors(const MoeLayerWeights& w, const std::string& p, const TensorAdder& add,
                     const StackedAdder& add_stacked) {
  add(p + "ffn_gate_inp.weight", w.router, false);
  add_stacked(p + "ffn_gate_exps.weight", w.gate);
  add_stacked(p + "ffn_up_exps.weight", w.up);
  add_stacked(p + "ffn_down_exps.weight", w.down);
  if (w.shared_gate.data == nullptr) return;
  add(p + "ffn_gate_inp_shexp.weight", make_view(DType::kF32, {w.shared_gate_inp.num_elements()}, w.shared_gate_inp.data),
      false);
  add(p + "ffn_gate_shexp.weight", w.shared_gate, true);
  add(p + "ffn_up_shexp.weight", w.shared_up, true);
  add(p + "ffn_down_shexp.weight", w.shared_down, true);
}

}  // namespace koi::model
