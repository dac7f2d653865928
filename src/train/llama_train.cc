#include "train/llama_train.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/random.h"
#include "kernels/gemm.h"
#include "kernels/ops.h"
#include "model/moe.h"
#include "tensor/dtype.h"
#include "train/linear.h"
#include "train/tensor_parallel.h"


namespace koi::train {
namespace {

void zero(std::vector<float>& buf, int64_t n) {
  ensure(buf, n);
  std::fill_n(buf.data(), n, 0.0f);
}

// out (N, C) = x * rstd * w per row; rstd (N) is kept for the backward pass.
void rmsnorm_forward(ThreadPool* pool, float* out, float* rstd, const float* x, const float* w, int64_t N, int64_t C,
                     float eps) {
  pool->parallel_for(N, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      const float* xr = x + n * C;
      double ss = 0.0;
      for (int64_t i = 0; i < C; ++i) ss += static_cast<double>(xr[i]) * xr[i];
      const float r = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(C)) + eps);
      rstd[n] = r;
      for (int64_t i = 0; i < C; ++i) out[n * C + i] = xr[i] * r * w[i];
    }
  });
}

// dx += d(out)/dx^T dout;  dw += sum_n dout * x * rstd (dw == nullptr: frozen, not computed).
// With y_i = w_i x_i r and dr/dx_j = -r^3 x_j / C:
//   dx_j = r w_j dy_j - r^3 / C * x_j * sum_i(dy_i w_i x_i).
void rmsnorm_backward(float* dx, float* dw, const float* dout, const float* x, const float* rstd, const float* w,
                      int64_t N, int64_t C) {
  for (int64_t n = 0; n < N; ++n) {
    const float* dy = dout + n * C;
    const float* xr = x + n * C;
    const float r = rstd[n];
    float dot = 0.0f;
    for (int64_t i = 0; i < C; ++i) dot += dy[i] * w[i] * xr[i];
    const float k = r * r * r / static_cast<float>(C) * dot;
    for (int64_t i = 0; i < C; ++i) {
      dx[n * C + i] += r * w[i] * dy[i] - k * xr[i];
    }
    if (dw != nullptr) {
      for (int64_t i = 0; i < C; ++i) dw[i] += dy[i] * xr[i] * r;
    }
  }
}

// Rotates pairs of each head of x (n_heads, D) by the angles of one position; sign -1
// applies the inverse rotation (the backward pass of a rotation is its transpose).
void rope_rotate(float* x, int64_t n_heads, int64_t D, const float* cos, const float* sin, kernels::RopeStyle style,
                 float sign) {
  const int64_t half = D / 2;
  for (int64_t head_idx = 0; head_idx < n_heads; ++head_idx) {
    float* h = x + head_idx * D;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = style == kernels::RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t b = style == kernels::RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float x0 = h[a], x1 = h[b], c = cos[i], s = sign * sin[i];
      h[a] = x0 * c - x1 * s;
      h[b] = x0 * s + x1 * c;
    }
  }
}


// Where flat offset `offset` lies in a buffer holding `pieces` one after the other (nullptr:
// in none); without pieces, base + offset.
float* locate(float* base, const std::vector<Range>* pieces, int64_t offset) {
  if (pieces == nullptr) return base + offset;
  int64_t position = 0;
  for (const Range& r : *pieces) {
    if (offset >= r.begin && offset < r.end) return base + position + (offset - r.begin);
    position += r.size();
  }
  return nullptr;
}

// Lays out the parameter tensors of c in their fixed order; when p is given, points its
// slots into base (at their offsets, or into the concatenated pieces when given).
std::vector<ParamTensor> layout_params(const model::ModelConfig& c, float* base, Params* p,
                                       const std::vector<Range>* pieces = nullptr) {
  std::vector<ParamTensor> out;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, bool decay, float** slot) {
    int64_t size = 1;
    for (int64_t d : shape) size *= d;
    if (p != nullptr) *slot = locate(base, pieces, offset);
    out.push_back({std::move(name), std::move(shape), offset, size, decay});
    offset += size;
  };
  Params scratch;
  Params* q = p != nullptr ? p : &scratch;
  q->layers.assign(static_cast<size_t>(c.n_layers), LayerParams{});
  const int64_t C = c.dim, V = c.n_vocab, F = c.ffn_dim, QD = c.q_dim(), KVD = c.kv_dim();
  add("model.embed_tokens.weight", {V, C}, true, &q->token_embd);
  for (int l = 0; l < c.n_layers; ++l) {
    LayerParams& L = q->layers[static_cast<size_t>(l)];
    L.bq = L.bk = L.bv = nullptr;
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    add(pre + "input_layernorm.weight", {C}, false, &L.attn_norm);
    add(pre + "self_attn.q_proj.weight", {QD, C}, true, &L.wq);
    add(pre + "self_attn.k_proj.weight", {KVD, C}, true, &L.wk);
    add(pre + "self_attn.v_proj.weight", {KVD, C}, true, &L.wv);
    if (c.qkv_bias) {
      add(pre + "self_attn.q_proj.bias", {QD}, false, &L.bq);
      add(pre + "self_attn.k_proj.bias", {KVD}, false, &L.bk);
      add(pre + "self_attn.v_proj.bias", {KVD}, false, &L.bv);
    }
    add(pre + "self_attn.o_proj.weight", {C, QD}, true, &L.wo);
    add(pre + "post_attention_layernorm.weight", {C}, false, &L.ffn_norm);
    if (c.moe.enabled()) {
      // Router, then each expert's gate, up and down, then the shared expert and its gate.
      const model::MoeHfNames n = model::moe_hf_names(c, l);
      const int64_t E = c.moe.n_experts, FE = c.moe.expert_ffn_dim, FS = c.moe.shared_ffn_dim;
      L.w_gate = L.w_up = L.w_down = nullptr;
      L.moe.gate.resize(E), L.moe.up.resize(E), L.moe.down.resize(E);
      add(n.router, {E, C}, true, &L.moe.router);
      for (int64_t e = 0; e < E; ++e) {
        add(n.gate[e], {FE, C}, true, &L.moe.gate[e]);
        add(n.up[e], {FE, C}, true, &L.moe.up[e]);
        add(n.down[e], {C, FE}, true, &L.moe.down[e]);
      }
      if (FS > 0) {
        add(n.shared_gate_inp, {1, C}, true, &L.moe.shared_gate_inp);
        add(n.shared_gate, {FS, C}, true, &L.moe.shared_gate);
        add(n.shared_up, {FS, C}, true, &L.moe.shared_up);
        add(n.shared_down, {C, FS}, true, &L.moe.shared_down);
      }
      continue;
    }
    add(pre + "mlp.gate_proj.weight", {F, C}, true, &L.w_gate);
    add(pre + "mlp.up_proj.weight", {F, C}, true, &L.w_up);
    add(pre + "mlp.down_proj.weight", {C, F}, true, &L.w_down);
  }
  add("model.norm.weight", {C}, false, &q->output_norm);
  if (c.tied_embeddings) {
    q->output = q->token_embd;
  } else {
    add("lm_head.weight", {V, C}, true, &q->output);
  }
  return out;
}

}  // namespace

std::vector<ParamTensor> param_layout(const model::ModelConfig& config) {
  return layout_params(config, nullptr, nullptr);
}

LlamaTrain::LlamaTrain(model::ModelConfig config, ThreadPool* pool)
    : config_(std::move(config)), pool_(pool), layer_end_(config_.n_layers) {}

void LlamaTrain::set_layer_range(int begin, int end) {
  KOI_CHECK(0 <= begin && begin < end && end <= config_.n_layers);
  layer_begin_ = begin, layer_end_ = end;
  acts_.clear(), moe_acts_.clear();  // reallocated for the range by the next forward()
}

float* LlamaTrain::stage_input(int B, int T) {
  resize_activations(B, T);
  return acts_[static_cast<size_t>(layer_begin_)].x_in.data();
}

float* LlamaTrain::stage_output_grad(int B, int T) {
  ensure(dx_, int64_t{B} * T * config_.dim);
  return dx_.data();
}

void LlamaTrain::swap_activations(SavedActivations& o) {
  std::swap(B_, o.B), std::swap(T_, o.T), std::swap(aux_loss_, o.aux_loss);
  acts_.swap(o.acts), moe_acts_.swap(o.moe_acts);
  x_out_.swap(o.x_out), rstd_f_.swap(o.rstd_f), xn_f_.swap(o.xn_f), probs_.swap(o.probs);
  inputs_.swap(o.inputs), targets_.swap(o.targets);
}

Result<LlamaTrain> LlamaTrain::create(const model::ModelConfig& config, ThreadPool* pool) {
  KOI_RETURN_IF_ERROR(config.validate());
  if (config.rope_scaling.enabled || !config.rope_factors.empty() || !config.rope_factors_long.empty()) {
    return Status::unsupported("training a model with rope scaling is not supported; train without it");
  }
  if (config.qk_norm || config.arch == "gemma2" || config.arch == "gemma3" || config.arch == "phi3") {
    return Status::unsupported("training a " + config.arch +
                               " model is not supported (per-head or post norms, GeGLU, fused tensors)");
  }
  if (config.sliding_window > 0) {
    return Status::unsupported("training with sliding-window attention is not supported; train with full attention");
  }
  if (config.moe.shared_ffn_dim > 0 && config.arch == "llama") {
    return Status::unsupported("a shared expert is Qwen2-MoE's (arch qwen2); a Mixtral-style (llama) model has none");
  }
  LlamaTrain m(config, pool);
  m.layout_ = param_layout(config);
  const int64_t total = m.layout_.back().offset + m.layout_.back().size;
  m.params_.assign(static_cast<size_t>(total), 0.0f);
  m.grads_.assign(static_cast<size_t>(total), 0.0f);
  const std::vector<float> inv_freq = config.rope_inv_freq();
  const int64_t half = config.head_dim / 2;
  m.rope_cos_.resize(static_cast<size_t>(config.max_seq_len * half));
  m.rope_sin_.resize(m.rope_cos_.size());
  for (int64_t pos = 0; pos < config.max_seq_len; ++pos) {
    kernels::rope_angles(pos, inv_freq.data(), config.head_dim, m.rope_cos_.data() + pos * half,
                         m.rope_sin_.data() + pos * half);
  }
  return m;
}

Params LlamaTrain::bind(float* base) const {
  Params p;
  layout_params(config_, base, &p);
  return p;
}

std::vector<Range> LlamaTrain::unit_pieces(int unit) const {
  KOI_CHECK(unit >= 0 && unit < num_units());
  // Layer l's tensors are contiguous, named "model.layers.<l>."; the root has the rest.
  auto layer_range = [&](int l) {
    const std::string prefix = "model.layers." + std::to_string(l) + ".";
    Range r{-1, -1};
    for (const ParamTensor& t : layout_) {
      if (!t.name.starts_with(prefix)) continue;
      if (r.begin < 0) r.begin = t.offset;
      r.end = t.offset + t.size;
    }
    return r;
  };
  if (unit < config_.n_layers) return {layer_range(unit)};
  const int64_t total = layout_.back().offset + layout_.back().size;
  return {{0, layer_range(0).begin}, {layer_range(config_.n_layers - 1).end, total}};
}

Params LlamaTrain::bind_unit(const float* buffer, int unit) const {
  const std::vector<Range> pieces = unit_pieces(unit);
  Params p;
  layout_params(config_, const_cast<float*>(buffer), &p, &pieces);
  return p;
}

Params LlamaTrain::unit_params(int unit, bool backward) {
  const float* buffer = nullptr;
  if (stream_ != nullptr) buffer = backward ? stream_->backward_params(unit) : stream_->forward_params(unit);
  return buffer != nullptr ? bind_unit(buffer, unit) : bind(params_.data());
}

Params LlamaTrain::unit_grads(int unit) {
  if (stream_ != nullptr) return bind_unit(stream_->backward_grads(unit), unit);
  if (!lora_) return bind(grads_.data());
  Params g;  // LoRA: the base is frozen, every slot nullptr and no base gradient is computed
  g.token_embd = g.output_norm = g.output = nullptr;
  g.layers.assign(static_cast<size_t>(config_.n_layers), LayerParams{});
  return g;
}

void init_random_tensor(const ParamTensor& t, size_t index, int n_layers, uint64_t seed, float* dst) {
  if (t.shape.size() == 1) {
    const bool is_norm = t.name.find("norm") != std::string::npos;
    std::fill_n(dst, t.size, is_norm ? 1.0f : 0.0f);
    return;
  }
  const bool out_proj = t.name.find("o_proj") != std::string::npos || t.name.find("down_proj") != std::string::npos ||
                        t.name.ends_with(".w2.weight");  // Mixtral's expert down projection
  const float stddev = out_proj ? 0.02f / std::sqrt(2.0f * static_cast<float>(n_layers)) : 0.02f;
  Rng rng(seed * 1000003 + index);
  for (int64_t j = 0; j < t.size; ++j) dst[j] = static_cast<float>(rng.normal()) * stddev;
}

void LlamaTrain::init_random(uint64_t seed) {
  for (size_t i = 0; i < layout_.size(); ++i) {
    init_random_tensor(layout_[i], i, config_.n_layers, seed, params_.data() + layout_[i].offset);
  }
}

Status LlamaTrain::load(const model::ModelWeights& w) {
  Params p = bind(params_.data());
  auto copy = [&](const TensorView& src, float* dst, int64_t n, const std::string& what) -> Status {
    if (src.data == nullptr || src.num_elements() != n) {
      return Status::invalid_argument("cannot train from these weights: " + what + " is missing or has the wrong size");
    }
    for (int64_t r = 0; r < src.num_rows(); ++r) dequantize_row(src.type, src.row(r), dst + r * src.ne[0], src.ne[0]);
    return ok_status();
  };
  const model::ModelConfig& c = config_;
  const int64_t C = c.dim, V = c.n_vocab, F = c.ffn_dim, QD = c.q_dim(), KVD = c.kv_dim();
  KOI_RETURN_IF_ERROR(copy(w.token_embd, p.token_embd, V * C, "token_embd"));
  if (static_cast<int>(w.layers.size()) != c.n_layers) {
    return Status::invalid_argument("cannot train from these weights: layer count differs from the config");
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const model::LayerWeights& S = w.layers[static_cast<size_t>(l)];
    LayerParams& L = p.layers[static_cast<size_t>(l)];
    const std::string b = "blk." + std::to_string(l) + ".";
    KOI_RETURN_IF_ERROR(copy(S.attn_norm, L.attn_norm, C, b + "attn_norm"));
    KOI_RETURN_IF_ERROR(copy(S.wq, L.wq, QD * C, b + "attn_q"));
    KOI_RETURN_IF_ERROR(copy(S.wk, L.wk, KVD * C, b + "attn_k"));
    KOI_RETURN_IF_ERROR(copy(S.wv, L.wv, KVD * C, b + "attn_v"));
    KOI_RETURN_IF_ERROR(copy(S.wo, L.wo, C * QD, b + "attn_output"));
    if (c.qkv_bias) {
      KOI_RETURN_IF_ERROR(copy(S.bq, L.bq, QD, b + "attn_q.bias"));
      KOI_RETURN_IF_ERROR(copy(S.bk, L.bk, KVD, b + "attn_k.bias"));
      KOI_RETURN_IF_ERROR(copy(S.bv, L.bv, KVD, b + "attn_v.bias"));
    }
    KOI_RETURN_IF_ERROR(copy(S.ffn_norm, L.ffn_norm, C, b + "ffn_norm"));
    if (c.moe.enabled()) {
      const int64_t E = c.moe.n_experts, FE = c.moe.expert_ffn_dim, FS = c.moe.shared_ffn_dim;
      if (static_cast<int64_t>(S.moe.gate.size()) != E || static_cast<int64_t>(S.moe.up.size()) != E ||
          static_cast<int64_t>(S.moe.down.size()) != E) {
        return Status::invalid_argument("cannot train from these weights: " + b + "ffn_*_exps do not hold " +
                                        std::to_string(E) + " experts");
      }
      KOI_RETURN_IF_ERROR(copy(S.moe.router, L.moe.router, E * C, b + "ffn_gate_inp"));
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = "[" + std::to_string(e) + "]";
        KOI_RETURN_IF_ERROR(copy(S.moe.gate[e], L.moe.gate[e], FE * C, b + "ffn_gate_exps" + x));
        KOI_RETURN_IF_ERROR(copy(S.moe.up[e], L.moe.up[e], FE * C, b + "ffn_up_exps" + x));
        KOI_RETURN_IF_ERROR(copy(S.moe.down[e], L.moe.down[e], C * FE, b + "ffn_down_exps" + x));
      }
      if (FS > 0) {
        KOI_RETURN_IF_ERROR(copy(S.moe.shared_gate_inp, L.moe.shared_gate_inp, C, b + "ffn_gate_inp_shexp"));
        KOI_RETURN_IF_ERROR(copy(S.moe.shared_gate, L.moe.shared_gate, FS * C, b + "ffn_gate_shexp"));
        KOI_RETURN_IF_ERROR(copy(S.moe.shared_up, L.moe.shared_up, FS * C, b + "ffn_up_shexp"));
        KOI_RETURN_IF_ERROR(copy(S.moe.shared_down, L.moe.shared_down, C * FS, b + "ffn_down_shexp"));
      }
      continue;
    }
    KOI_RETURN_IF_ERROR(copy(S.w_gate, L.w_gate, F * C, b + "ffn_gate"));
    KOI_RETURN_IF_ERROR(copy(S.w_up, L.w_up, F * C, b + "ffn_up"));
    KOI_RETURN_IF_ERROR(copy(S.w_down, L.w_down, C * F, b + "ffn_down"));
  }
  KOI_RETURN_IF_ERROR(copy(w.output_norm, p.output_norm, C, "output_norm"));
  if (!c.tied_embeddings) KOI_RETURN_IF_ERROR(copy(w.output, p.output, V * C, "output"));
  return ok_status();
}

model::ModelWeights LlamaTrain::weights_view() const {
  Params p = bind(const_cast<float*>(params_.data()));
  const model::ModelConfig& c = config_;
  const int64_t C = c.dim, V = c.n_vocab, F = c.ffn_dim, QD = c.q_dim(), KVD = c.kv_dim();
  auto view = [](std::initializer_list<int64_t> ne, const float* data) {
    return data == nullptr ? TensorView{} : make_view(DType::kF32, ne, data);
  };
  model::ModelWeights w;
  w.token_embd = view({C, V}, p.token_embd);
  for (const LayerParams& L : p.layers) {
    model::LayerWeights lw;
    lw.attn_norm = view({C}, L.attn_norm);
    lw.wq = view({C, QD}, L.wq);
    lw.wk = view({C, KVD}, L.wk);
    lw.wv = view({C, KVD}, L.wv);
    lw.wo = view({QD, C}, L.wo);
    lw.bq = view({QD}, L.bq);
    lw.bk = view({KVD}, L.bk);
    lw.bv = view({KVD}, L.bv);
    lw.ffn_norm = view({C}, L.ffn_norm);
    lw.w_gate = view({C, F}, L.w_gate);
    lw.w_up = view({C, F}, L.w_up);
    lw.w_down = view({F, C}, L.w_down);
    if (c.moe.enabled()) {
      const int64_t E = c.moe.n_experts, FE = c.moe.expert_ffn_dim, FS = c.moe.shared_ffn_dim;
      lw.moe.router = view({C, E}, L.moe.router);
      for (int64_t e = 0; e < E; ++e) {
        lw.moe.gate.push_back(view({C, FE}, L.moe.gate[e]));
        lw.moe.up.push_back(view({C, FE}, L.moe.up[e]));
        lw.moe.down.push_back(view({FE, C}, L.moe.down[e]));
      }
      lw.moe.shared_gate_inp = view({C}, L.moe.shared_gate_inp);
      lw.moe.shared_gate = view({C, FS}, L.moe.shared_gate);
      lw.moe.shared_up = view({C, FS}, L.moe.shared_up);
      lw.moe.shared_down = view({FS, C}, L.moe.shared_down);
    }
    w.layers.push_back(lw);
  }
  w.output_norm = view({C}, p.output_norm);
  w.output = view({C, V}, p.output);
  return w;
}

void LlamaTrain::resize_activations(int B, int T) {
  B_ = B, T_ = T;
  const model::ModelConfig& c = config_;
  const int64_t N = int64_t{B} * T, C = c.dim, F = c.moe.enabled() ? 0 : c.ffn_dim;  // experts: moe_acts_
  acts_.resize(static_cast<size_t>(c.n_layers));
  moe_acts_.resize(c.moe.enabled() ? static_cast<size_t>(c.n_layers) : 0);
  for (int l = layer_begin_; l < layer_end_; ++l) {  // a pipeline stage keeps its layers' only
    LayerActs& a = acts_[static_cast<size_t>(l)];
    ensure(a.x_in, N * C);
    ensure(a.rstd1, N);
    ensure(a.xn1, N * C);
    ensure(a.q, N * c.q_dim());
    ensure(a.k, N * c.kv_dim());
    ensure(a.v, N * c.kv_dim());
    ensure(a.att, int64_t{B} * c.n_heads * T * T);
    ensure(a.attn_out, N * c.q_dim());
    ensure(a.x_mid, N * C);
    ensure(a.rstd2, N);
    ensure(a.xn2, N * C);
    ensure(a.gate, N * F);
    ensure(a.up, N * F);
    ensure(a.sig, N * F);
    ensure(a.h, N * F);
  }
  ensure(x_out_, N * C);
  ensure(rstd_f_, N);
  ensure(xn_f_, N * C);
  ensure(probs_, N * c.n_vocab);
  inputs_.resize(static_cast<size_t>(N));
  targets_.resize(static_cast<size_t>(N));
}

// Causal attention works in blocks of kCausalRows query rows (a multiple of every sgemm
// level's row tile: 12, 6, 4), so the products skip most of the masked upper triangle: rows
// [r0, r1) only meet keys [0, r1), and keys [c0, c1) only meet queries [c0, T).
constexpr int64_t kCausalRows = 24;

// Per (b, h), with Q (T, D), K and V (T, D) of kv head kvh = h / (H / KV):
//   P = causal_softmax(Q K^T / sqrt(D)) (kept in att, (B, H, T, T)),  attn_out = P V.
// The products are sgemms over the strided rows of q, k, v; the masked entries of P are 0.
void LlamaTrain::attention_forward(int layer) {
  LayerActs& a = acts_[static_cast<size_t>(layer)];
  const model::ModelConfig& c = config_;
  const int64_t T = T_, D = c.head_dim, H = c.n_heads, QD = c.q_dim(), KVD = c.kv_dim();
  const int64_t group = H / c.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  pool_->parallel_for(int64_t{B_} * H, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / H, h = item % H, kvh = h / group;
      const float* q = a.q.data() + b * T * QD + h * D;
      const float* k = a.k.data() + b * T * KVD + kvh * D;
      const float* v = a.v.data() + b * T * KVD + kvh * D;
      float* p = a.att.data() + item * T * T;
      float* out = a.attn_out.data() + b * T * QD + h * D;
      for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {
        const int64_t r1 = std::min(T, r0 + kCausalRows);
        kernels::sgemm(r1 - r0, r1, D, {q + r0 * QD, QD, 1}, {k, 1, KVD}, p + r0 * T, T, false, nullptr);
        for (int64_t t = r0; t < r1; ++t) {
          float* row = p + t * T;
          for (int64_t j = 0; j <= t; ++j) row[j] *= scale;
          kernels::softmax(row, t + 1);
          std::fill(row + t + 1, row + T, 0.0f);
        }
        kernels::sgemm(r1 - r0, D, r1, {p + r0 * T, T, 1}, {v, KVD, 1}, out + r0 * QD, QD, false, nullptr);
      }
    }
  });
}

// With P = att[b, h] and dO = d attn_out[b, :, h]:
//   dV += P^T dO;  dP = dO V^T;  dS[t, j] = P[t, j] (dP[t, j] - sum_i P[t, i] dP[t, i]) / sqrt(D);
//   dQ += dS K;  dK += dS^T Q.
// One work item per (b, kv head) owns every write to its dk, dv and its heads' dq.
void LlamaTrain::attention_backward(int layer, const float* dout, float* dq, float* dk, float* dv) {
  const LayerActs& a = acts_[static_cast<size_t>(layer)];
  const model::ModelConfig& c = config_;
  const int64_t T = T_, D = c.head_dim, H = c.n_heads, KV = c.n_kv_heads, QD = c.q_dim(), KVD = c.kv_dim();
  const int64_t group = H / KV;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  pool_->parallel_for(int64_t{B_} * KV, [&](int64_t begin, int64_t end) {
    std::vector<float> ds(static_cast<size_t>(T * T));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t b = item / KV, kvh = item % KV;
      const float* k = a.k.data() + b * T * KVD + kvh * D;
      const float* v = a.v.data() + b * T * KVD + kvh * D;
      float* dk_b = dk + b * T * KVD + kvh * D;
      float* dv_b = dv + b * T * KVD + kvh * D;
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const float* p = a.att.data() + (b * H + h) * T * T;
        const float* g = dout + b * T * QD + h * D;
        const float* q = a.q.data() + b * T * QD + h * D;
        float* dq_bh = dq + b * T * QD + h * D;
        for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {
          const int64_t r1 = std::min(T, r0 + kCausalRows), rows = r1 - r0, later = T - r0;
          // Keys [r0, r1) meet queries [r0, T): P^T and dS^T read from row r0, column r0.
          kernels::sgemm(rows, D, later, {p + r0 * T + r0, 1, T}, {g + r0 * QD, QD, 1}, dv_b + r0 * KVD, KVD, true,
                         nullptr);
          kernels::sgemm(rows, r1, D, {g + r0 * QD, QD, 1}, {v, 1, KVD}, ds.data() + r0 * T, T, false, nullptr);
          for (int64_t t = r0; t < r1; ++t) {
            const float* pt = p + t * T;
            float* st = ds.data() + t * T;
            const float sum = kernels::dot(pt, st, t + 1);
            for (int64_t j = 0; j <= t; ++j) st[j] = pt[j] * (st[j] - sum) * scale;
            std::fill(st + t + 1, st + T, 0.0f);
          }
          kernels::sgemm(rows, D, r1, {ds.data() + r0 * T, T, 1}, {k, KVD, 1}, dq_bh + r0 * QD, QD, true, nullptr);
        }
        // dK needs every row of dS: a second sweep, by key blocks.
        for (int64_t r0 = 0; r0 < T; r0 += kCausalRows) {
          const int64_t r1 = std::min(T, r0 + kCausalRows);
          kernels::sgemm(r1 - r0, D, T - r0, {ds.data() + r0 * T + r0, 1, T}, {q + r0 * QD, QD, 1}, dk_b + r0 * KVD,
                         KVD, true, nullptr);
        }
      }
    }
  });
}

float LlamaTrain::forward(const int32_t* inputs, const int32_t* targets, int B, int T) {
  KOI_CHECK(T <= config_.max_seq_len);
  resize_activations(B, T);
  const model::ModelConfig& c = config_;
  const int64_t N = int64_t{B} * T, C = c.dim, F = c.ffn_dim, V = c.n_vocab, QD = c.q_dim(), KVD = c.kv_dim();
  const int64_t half = c.head_dim / 2;
  const int root = c.n_layers;
  const Params p = unit_params(root, /*backward=*/false);  // embedding, final norm, output
  std::copy_n(inputs, N, inputs_.data());
  std::copy_n(targets, N, targets_.data());

  // Embedding: x (N, C) = token_embd[inputs] (vocabulary-parallel: the rows this shard holds,
  // zero elsewhere, summed over the ranks); a later pipeline stage got x in stage_input().
  const int64_t V_all = vocab_full_ > 0 ? vocab_full_ : V;
  for (int64_t n = 0; n < N; ++n) {
    KOI_CHECK(inputs[n] >= 0 && inputs[n] < V_all && targets[n] >= 0 && targets[n] < V_all);
    if (layer_begin_ > 0) continue;
    const int64_t id = inputs[n] - vocab_begin_;
    float* x = acts_[0].x_in.data() + n * C;
    if (id >= 0 && id < V) {
      std::copy_n(p.token_embd + id * C, C, x);
    } else {
      std::fill_n(x, C, 0.0f);
    }
  }
  if (vocab_full_ > 0 && layer_begin_ == 0) tp_allreduce(acts_[0].x_in.data(), N * C, "tp allreduce embedding");
  for (int l = layer_begin_; l < layer_end_; ++l) {
    const trace::Span span(trace_, trace_ ? "layer " + std::to_string(l) : std::string(), "layer");
    const Params pl = unit_params(l, /*backward=*/false);
    const LayerParams& L = pl.layers[static_cast<size_t>(l)];
    LayerActs& a = acts_[static_cast<size_t>(l)];
    // Attention: xn1 = rmsnorm(x_in); q (N, QD), k, v (N, KVD); rope on q and k.
    rmsnorm_forward(pool_, a.xn1.data(), a.rstd1.data(), a.x_in.data(), L.attn_norm, N, C, c.norm_eps);
    linear_forward(pool_, a.q.data(), a.xn1.data(), L.wq, L.bq, N, C, QD);
    linear_forward(pool_, a.k.data(), a.xn1.data(), L.wk, L.bk, N, C, KVD);
    linear_forward(pool_, a.v.data(), a.xn1.data(), L.wv, L.bv, N, C, KVD);
    lora_forward(l, LoraTarget::kQ, a.xn1.data(), a.q.data(), N);
    lora_forward(l, LoraTarget::kK, a.xn1.data(), a.k.data(), N);
    lora_forward(l, LoraTarget::kV, a.xn1.data(), a.v.data(), N);
    pool_->parallel_for(N, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const int64_t pos = n % T;
        const float* cs = rope_cos_.data() + pos * half;
        const float* sn = rope_sin_.data() + pos * half;
        rope_rotate(a.q.data() + n * QD, c.n_heads, c.head_dim, cs, sn, c.rope_style, 1.0f);
        rope_rotate(a.k.data() + n * KVD, c.n_kv_heads, c.head_dim, cs, sn, c.rope_style, 1.0f);
      }
    });
    attention_forward(l);
    // x_mid = x_in + attn_out Wo^T   (N, C)
    linear_forward(pool_, a.x_mid.data(), a.attn_out.data(), L.wo, nullptr, N, QD, C);
    lora_forward(l, LoraTarget::kO, a.attn_out.data(), a.x_mid.data(), N);
    tp_allreduce(a.x_mid.data(), N * C, "tp allreduce attention output");  // row-parallel o_proj
    add_into(a.x_mid.data(), a.x_in.data(), N * C);
    // SwiGLU: h = silu(xn2 Wg^T) * (xn2 Wu^T)   (N, F);  x_next = x_mid + h Wd^T   (N, C)
    rmsnorm_forward(pool_, a.xn2.data(), a.rstd2.data(), a.x_mid.data(), L.ffn_norm, N, C, c.norm_eps);
    float* x_next = l + 1 < layer_end_ ? acts_[static_cast<size_t>(l) + 1].x_in.data() : x_out_.data();
    if (c.moe.enabled()) {  // or the experts: x_next = x_mid + moe(xn2)
      moe_forward(pool_, c, L.moe, a.xn2.data(), x_next, N, moe_acts_[static_cast<size_t>(l)],
                  ep_.comm != nullptr ? &ep_ : nullptr, batch_group_);
      add_into(x_next, a.x_mid.data(), N * C);
      unit_done(l, /*backward=*/false);
      continue;
    }
    linear_forward(pool_, a.gate.data(), a.xn2.data(), L.w_gate, nullptr, N, C, F);
    linear_forward(pool_, a.up.data(), a.xn2.data(), L.w_up, nullptr, N, C, F);
    lora_forward(l, LoraTarget::kGate, a.xn2.data(), a.gate.data(), N);
    lora_forward(l, LoraTarget::kUp, a.xn2.data(), a.up.data(), N);
    pool_->parallel_for(N, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {  // row by row: the same values for any split
        kernels::sigmoid(a.gate.data() + n * F, a.sig.data() + n * F, F);
        for (int64_t i = n * F; i < (n + 1) * F; ++i) a.h[i] = a.gate[i] * a.sig[i] * a.up[i];
      }
    });
    linear_forward(pool_, x_next, a.h.data(), L.w_down, nullptr, N, F, C);
    lora_forward(l, LoraTarget::kDown, a.h.data(), x_next, N);
    tp_allreduce(x_next, N * C, "tp allreduce mlp output");  // row-parallel down_proj
    add_into(x_next, a.x_mid.data(), N * C);
    unit_done(l, /*backward=*/false);
  }
  aux_loss_ = 0.0f;
  for (int l = layer_begin_; l < layer_end_ && c.moe.enabled(); ++l) {
    aux_loss_ += moe_aux_coef_ * moe_acts_[static_cast<size_t>(l)].aux / static_cast<float>(c.n_layers);
  }
  if (layer_end_ < c.n_layers) return 0.0f;  // a pipeline stage before the last: x_out_ goes on
  // Head: probs (N, V) = softmax(rmsnorm(x_out) Wout^T); loss = mean_n -log probs[n, target]
  const trace::Span head_span(trace_, "head", "layer");
  rmsnorm_forward(pool_, xn_f_.data(), rstd_f_.data(), x_out_.data(), p.output_norm, N, C, c.norm_eps);
  linear_forward(pool_, probs_.data(), xn_f_.data(), p.output, nullptr, N, C, V);
  const double loss = softmax_cross_entropy(N);
  unit_done(root, /*backward=*/false);
  return static_cast<float>(loss / static_cast<double>(N));
}

int64_t LlamaTrain::vocab_valid() const {
  const int64_t V = config_.n_vocab;
  return vocab_full_ > 0 ? std::clamp<int64_t>(vocab_full_ - vocab_begin_, 0, V) : V;
}

double LlamaTrain::softmax_cross_entropy(int64_t N) {
  const int64_t V = config_.n_vocab;
  if (vocab_full_ > 0) {  // vocabulary-parallel (tensor_parallel.h)
    if (!tp_status_.ok()) return 0.0;
    Result<double> loss = vocab_parallel_cross_entropy(*tp_, pool_, probs_.data(), targets_.data(), N, V,
                                                       vocab_begin_, vocab_valid());
    tp_status_ = loss.status();
    return loss.ok() ? *loss : 0.0;
  }
  pool_->parallel_for(N, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) kernels::softmax(probs_.data() + n * V, V);
  });
  double loss = 0.0;
  for (int64_t n = 0; n < N; ++n) loss -= std::log(static_cast<double>(probs_[n * V + targets_[n]]));
  return loss;
}

void LlamaTrain::zero_grad() {
  std::fill(grads_.begin(), grads_.end(), 0.0f);
  if (lora_) lora_->zero_grad();
}

Status LlamaTrain::add_lora(const LoraConfig& config, uint64_t seed) {
  if (config_.moe.enabled()) {
    return Status::unsupported("LoRA on a mixture-of-experts model is not supported; fine-tune it fully (lora_rank 0)");
  }
  KOI_ASSIGN_OR_RETURN(LoraAdapters adapters, LoraAdapters::create(config_, config));
  adapters.init_random(seed);
  lora_ = std::move(adapters);
  grads_ = {};  // the base is frozen
  return ok_status();
}

// The head's backward pass: from the loss to dx_ = d loss / d x_out   (N, C).
void LlamaTrain::head_backward(const Params& p, const Params& g, float loss_scale) {
  const model::ModelConfig& c = config_;
  const int64_t N = int64_t{B_} * T_, C = c.dim, V = c.n_vocab;
  // Cross-entropy: dlogits = loss_scale * (probs - onehot(target))   (N, V)
  const trace::Span head_span(trace_, "head", "layer");
  ensure(dlogits_, N * V);
  pool_->parallel_for(N, [&](int64_t begin, int64_t end) {
    for (int64_t n = begin; n < end; ++n) {
      for (int64_t v = 0; v < V; ++v) dlogits_[n * V + v] = loss_scale * probs_[n * V + v];
      const int64_t t = targets_[n] - vocab_begin_;  // the target's column, when this shard has it
      if (t >= 0 && t < vocab_valid()) dlogits_[n * V + t] -= loss_scale;
    }
  });
  zero(dxn_, N * C);
  linear_backward(pool_, dxn_.data(), g.output, nullptr, dlogits_.data(), xn_f_.data(), p.output, N, C, V);
  if (vocab_full_ > 0) tp_allreduce(dxn_.data(), N * C, "tp allreduce head input grad");  // vocabulary-parallel head
  zero(dx_, N * C);  // d loss / d residual stream, (N, C)
  rmsnorm_backward(dx_.data(), g.output_norm, dxn_.data(), x_out_.data(), rstd_f_.data(), p.output_norm, N, C);
}

void LlamaTrain::backward(float loss_scale) {
  const model::ModelConfig& c = config_;
  const int64_t T = T_, N = int64_t{B_} * T, C = c.dim, F = c.ffn_dim, V = c.n_vocab, QD = c.q_dim(),
                KVD = c.kv_dim();
  const int64_t half = c.head_dim / 2;
  const int root = c.n_layers;
  const Params p = unit_params(root, /*backward=*/true);  // embedding, final norm, output
  const Params g = unit_grads(root);

  // Cross-entropy: dlogits = loss_scale * (probs - onehot(target))   (N, V); a pipeline stage
  // before the last starts from the gradient of its output, already in dx_.
  if (layer_end_ == c.n_layers) head_backward(p, g, loss_scale);
  for (int l = layer_end_ - 1; l >= layer_begin_; --l) {
    const trace::Span span(trace_, trace_ ? "layer " + std::to_string(l) : std::string(), "layer");
    const Params pl = unit_params(l, /*backward=*/true), gl = unit_grads(l);
    const LayerParams& L = pl.layers[static_cast<size_t>(l)];
    const LayerParams& G = gl.layers[static_cast<size_t>(l)];
    const LayerActs& a = acts_[static_cast<size_t>(l)];
    // SwiGLU block, from dx = d x_next (which is also the residual part of d x_mid).
    if (c.moe.enabled()) {  // or the experts, whose per-token loss share is coef * mean_l aux_l
      const float aux_scale = loss_scale * static_cast<float>(N) * moe_aux_coef_ / static_cast<float>(c.n_layers);
      zero(dxn_, N * C);
      moe_backward(pool_, c, L.moe, G.moe, dx_.data(), a.xn2.data(), moe_acts_[static_cast<size_t>(l)], aux_scale,
                   dxn_.data(), N, moe_scratch_, ep_.comm != nullptr ? &ep_ : nullptr);
    } else {
      zero(dh_, N * F);
      linear_backward(pool_, dh_.data(), G.w_down, nullptr, dx_.data(), a.h.data(), L.w_down, N, F, C);
      lora_backward(l, LoraTarget::kDown, a.h.data(), dx_.data(), dh_.data(), N);
      ensure(dgate_, N * F);
      ensure(dup_, N * F);
      pool_->parallel_for(N * F, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const float gi = a.gate[i], s = a.sig[i];
          dgate_[i] = dh_[i] * a.up[i] * s * (1.0f + gi * (1.0f - s));
          dup_[i] = dh_[i] * gi * s;
        }
      });
      zero(dxn_, N * C);
      linear_backward(pool_, dxn_.data(), G.w_gate, nullptr, dgate_.data(), a.xn2.data(), L.w_gate, N, C, F);
      linear_backward(pool_, dxn_.data(), G.w_up, nullptr, dup_.data(), a.xn2.data(), L.w_up, N, C, F);
      lora_backward(l, LoraTarget::kGate, a.xn2.data(), dgate_.data(), dxn_.data(), N);
      lora_backward(l, LoraTarget::kUp, a.xn2.data(), dup_.data(), dxn_.data(), N);
      tp_allreduce(dxn_.data(), N * C, "tp allreduce mlp input grad");  // column-parallel gate/up
    }
    rmsnorm_backward(dx_.data(), G.ffn_norm, dxn_.data(), a.x_mid.data(), a.rstd2.data(), L.ffn_norm, N, C);

    // Attention block, from dx = d x_mid (also the residual part of d x_in).
    zero(dattn_, N * QD);
    linear_backward(pool_, dattn_.data(), G.wo, nullptr, dx_.data(), a.attn_out.data(), L.wo, N, QD, C);
    lora_backward(l, LoraTarget::kO, a.attn_out.data(), dx_.data(), dattn_.data(), N);
    zero(dq_, N * QD);
    zero(dk_, N * KVD);
    zero(dv_, N * KVD);
    attention_backward(l, dattn_.data(), dq_.data(), dk_.data(), dv_.data());
    pool_->parallel_for(N, [&](int64_t begin, int64_t end) {
      for (int64_t n = begin; n < end; ++n) {
        const int64_t pos = n % T;
        const float* cs = rope_cos_.data() + pos * half;
        const float* sn = rope_sin_.data() + pos * half;
        rope_rotate(dq_.data() + n * QD, c.n_heads, c.head_dim, cs, sn, c.rope_style, -1.0f);
        rope_rotate(dk_.data() + n * KVD, c.n_kv_heads, c.head_dim, cs, sn, c.rope_style, -1.0f);
      }
    });
    zero(dxn_, N * C);
    linear_backward(pool_, dxn_.data(), G.wq, G.bq, dq_.data(), a.xn1.data(), L.wq, N, C, QD);
    linear_backward(pool_, dxn_.data(), G.wk, G.bk, dk_.data(), a.xn1.data(), L.wk, N, C, KVD);
    linear_backward(pool_, dxn_.data(), G.wv, G.bv, dv_.data(), a.xn1.data(), L.wv, N, C, KVD);
    lora_backward(l, LoraTarget::kQ, a.xn1.data(), dq_.data(), dxn_.data(), N);
    lora_backward(l, LoraTarget::kK, a.xn1.data(), dk_.data(), dxn_.data(), N);
    lora_backward(l, LoraTarget::kV, a.xn1.data(), dv_.data(), dxn_.data(), N);
    tp_allreduce(dxn_.data(), N * C, "tp allreduce attention input grad");  // column-parallel q/k/v
    rmsnorm_backward(dx_.data(), G.attn_norm, dxn_.data(), a.x_in.data(), a.rstd1.data(), L.attn_norm, N, C);
    unit_done(l, /*backward=*/true);
  }
  // Embedding: d token_embd[inputs[n]] += dx[n] (the rows this shard holds); a later pipeline
  // stage leaves dx_ to send back.
  if (g.token_embd != nullptr && layer_begin_ == 0) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t id = inputs_[n] - vocab_begin_;
      if (id >= 0 && id < V) add_into(g.token_embd + id * C, dx_.data() + n * C, C);
    }
  }
  unit_done(root, /*backward=*/true);
}

void LlamaTrain::tp_allreduce(float* x, int64_t n, const char* what) {
  if (tp_ == nullptr || tp_->size() == 1 || !tp_status_.ok()) return;
  tp_status_ = tp_->allreduce_sum(x, n, what);
}

void LlamaTrain::lora_forward(int layer, LoraTarget target, const float* x, float* y, int64_t N) {
  if (lora_ && lora_->adapts(target)) lora_->forward(pool_, layer, target, x, y, N);
}

void LlamaTrain::lora_backward(int layer, LoraTarget target, const float* x, const float* dy, float* dx, int64_t N) {
  if (lora_ && lora_->adapts(target)) lora_->backward(pool_, layer, target, x, dy, dx, N);
}

}  // namespace koi::train
