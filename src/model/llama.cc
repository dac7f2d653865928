#include "model/llama.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <optional>
#include <string>

#include "kernels/attention.h"
#include "kernels/ops.h"

namespace koi::model {
namespace {

void ensure(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
}

// fn(t_begin, t_end) over [0, T) in token ranges: on `pool` when the batch has enough tokens (a
// decode step of many sequences, a prompt) to pay for waking it, else on the calling thread. For
// per-token work, whose result does not depend on the split.
void over_tokens(int64_t T, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kParallelTokens = 8;
  if (pool != nullptr && T >= kParallelTokens) {
    pool->parallel_for(T, fn);
  } else {
    fn(0, T);
  }
}

void add_bias(float* y, const TensorView& bias, int64_t n_tokens, int64_t width) {
  if (bias.data == nullptr) return;
  for (int64_t t = 0; t < n_tokens; ++t) kernels::axpy(1.0f, bias.f32(), y + t * width, width);
}

// Qwen3's per-head norm: each of the n_heads heads of head_dim values in each of the
// n_tokens rows of x (width n_heads * head_dim) is RMS-normalised with `weight`, in place.
void per_head_rmsnorm(float* x, const TensorView& weight, int64_t n_tokens, int64_t n_heads, int64_t head_dim,
                      float eps) {
  for (int64_t r = 0; r < n_tokens * n_heads; ++r) {
    kernels::rmsnorm(x + r * head_dim, weight.f32(), x + r * head_dim, head_dim, eps);
  }
}

}  // namespace

Status check_tensor(const TensorView& t, const std::string& name, std::initializer_list<int64_t> ne,
                    bool f32_only) {
  TensorView want = make_view(DType::kF32, ne, nullptr);
  if (t.data == nullptr) return Status::corrupt("tensor " + name + " is missing");
  if (t.n_dims != want.n_dims || t.ne != want.ne) {
    return Status::corrupt("tensor " + name + " has shape " + t.shape_string() + " but the config implies " +
                           want.shape_string() + "; the weights do not belong to this config");
  }
  if (f32_only && t.type != DType::kF32) {
    return Status::unsupported("tensor " + name + " has type " + std::string(dtype_name(t.type)) +
                               "; norms and biases must be f32");
  }
  if (t.ne[0] % dtype_block_size(t.type) != 0) {
    return Status::corrupt("tensor " + name + " has rows of " + std::to_string(t.ne[0]) +
                           " values, not a multiple of the " + std::string(dtype_name(t.type)) + " block size");
  }
  return ok_status();
}

namespace {

// The table layer `layer` of sequence `s` writes and reads: a split cache keeps its sliding-window
// layers in the window table.
std::span<const int32_t> table_of(const BatchSequence& s, const KvCacheShape& ks, int layer) {
  return ks.split() && ks.windowed[static_cast<size_t>(layer)] ? s.window_block_table : s.block_table;
}

// The blocks [first_block, pos / block_size] of `table` must exist and be in the cache.
Status check_table(std::span<const int32_t> table, int64_t first_block, int32_t pos, const KvCacheShape& ks) {
  if (static_cast<int64_t>(table.size()) * ks.block_size <= pos) {
    return Status::invalid_argument("forward batch: block table too short for position " + std::to_string(pos));
  }
  for (int64_t b = first_block; b <= pos / ks.block_size; ++b) {
    if (table[b] < 0 || table[b] >= ks.num_blocks) {
      return Status::invalid_argument("forward batch: block id " + std::to_string(table[b]) + " out of range");
    }
  }
  return ok_status();
}

}  // namespace

Status validate_weights(const ModelConfig& c, const ModelWeights& w) {
  KOI_RETURN_IF_ERROR(check_tensor(w.token_embd, "token_embd", {c.dim, c.n_vocab}, false));
  KOI_RETURN_IF_ERROR(check_tensor(w.output_norm, "output_norm", {c.dim}, true));
  KOI_RETURN_IF_ERROR(check_tensor(w.output, "output", {c.dim, c.n_vocab}, false));
  if (static_cast<int>(w.layers.size()) != c.n_layers) {
    return Status::corrupt("model has " + std::to_string(w.layers.size()) + " layers of weights, config says " +
                           std::to_string(c.n_layers));
  }
  for (int l = 0; l < c.n_layers; ++l) {
    const LayerWeights& L = w.layers[l];
    std::string p = "blk." + std::to_string(l) + ".";
    KOI_RETURN_IF_ERROR(check_tensor(L.attn_norm, p + "attn_norm", {c.dim}, true));
    KOI_RETURN_IF_ERROR(check_tensor(L.wq, p + "attn_q", {c.dim, c.q_dim()}, false));
    KOI_RETURN_IF_ERROR(check_tensor(L.wk, p + "attn_k", {c.dim, c.kv_dim()}, false));
    KOI_RETURN_IF_ERROR(check_tensor(L.wv, p + "attn_v", {c.dim, c.kv_dim()}, false));
    KOI_RETURN_IF_ERROR(check_tensor(L.wo, p + "attn_output", {c.q_dim(), c.dim}, false));
    if (c.qkv_bias) {
      KOI_RETURN_IF_ERROR(check_tensor(L.bq, p + "attn_q.bias", {c.q_dim()}, true));
      KOI_RETURN_IF_ERROR(check_tensor(L.bk, p + "attn_k.bias", {c.kv_dim()}, true));
      KOI_RETURN_IF_ERROR(check_tensor(L.bv, p + "attn_v.bias", {c.kv_dim()}, true));
    }
    if (c.qk_norm) {
      KOI_RETURN_IF_ERROR(check_tensor(L.attn_q_norm, p + "attn_q_norm", {c.head_dim}, true));
      KOI_RETURN_IF_ERROR(check_tensor(L.attn_k_norm, p + "attn_k_norm", {c.head_dim}, true));
    }
    KOI_RETURN_IF_ERROR(check_tensor(L.ffn_norm, p + "ffn_norm", {c.dim}, true));
    if (c.post_norms) {
      KOI_RETURN_IF_ERROR(check_tensor(L.attn_post_norm, p + "post_attention_norm", {c.dim}, true));
      KOI_RETURN_IF_ERROR(check_tensor(L.ffn_post_norm, p + "post_ffw_norm", {c.dim}, true));
    }
    if (c.moe.enabled()) {
      KOI_RETURN_IF_ERROR(validate_moe_weights(c, L.moe, p));
      continue;
    }
    KOI_RETURN_IF_ERROR(check_tensor(L.w_gate, p + "ffn_gate", {c.dim, c.ffn_dim}, false));
    KOI_RETURN_IF_ERROR(check_tensor(L.w_up, p + "ffn_up", {c.dim, c.ffn_dim}, false));
    KOI_RETURN_IF_ERROR(check_tensor(L.w_down, p + "ffn_down", {c.ffn_dim, c.dim}, false));
  }
  return ok_status();
}

LlamaModel::LlamaModel(ModelConfig config, ModelWeights weights)
    : config_(std::move(config)), weights_(std::move(weights)), packed_(pack_weights(weights_)) {
  for (int layer = 0; layer < config_.n_layers; ++layer) {
    std::vector<float> f = config_.rope_inv_freq_of(layer);
    const auto same = std::find(inv_freq_.begin(), inv_freq_.end(), f);
    inv_freq_of_layer_.push_back(static_cast<int>(same - inv_freq_.begin()));
    if (same == inv_freq_.end()) inv_freq_.push_back(std::move(f));
  }
}

KvCacheShape LlamaModel::kv_shape(int num_blocks, int block_size, DType dtype, bool split_windows) const {
  KvCacheShape s;
  s.n_layers = config_.n_layers;
  s.n_kv_heads = config_.n_kv_heads;
  s.head_dim = config_.head_dim;
  s.block_size = block_size;
  s.num_blocks = num_blocks;
  s.dtype = dtype;
  for (int layer = 0; split_windows && layer < config_.n_layers; ++layer) {
    if (config_.window_of(layer) > 0) s.window = std::max(s.window, config_.window_of(layer));
  }
  if (s.window > 0) {
    for (int layer = 0; layer < config_.n_layers; ++layer) s.windowed.push_back(config_.window_of(layer) > 0);
  }
  return s;
}

Status LlamaModel::forward(const ForwardBatch& batch, KvCache& kv, float* logits, ThreadPool* pool) {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens();
  const KvCacheShape& ks = kv.shape();
  if (batch.positions.size() != batch.token_ids.size() || batch.seq_index.size() != batch.token_ids.size()) {
    return Status::invalid_argument("forward batch: token, position and sequence lists differ in length");
  }
  if (ks.n_layers != c.n_layers || ks.n_kv_heads != c.n_kv_heads || ks.head_dim != c.head_dim) {
    return Status::invalid_argument("forward batch: KV cache shape does not match the model");
  }
  if (ks.split() && static_cast<int>(ks.windowed.size()) != c.n_layers) {
    return Status::invalid_argument("forward batch: the KV cache's sliding-window layers are not the model's");
  }
  for (int layer = 0; ks.split() && layer < c.n_layers; ++layer) {
    if (ks.windowed[static_cast<size_t>(layer)] != (c.window_of(layer) > 0) || ks.window < c.window_of(layer)) {
      return Status::invalid_argument("forward batch: the KV cache's sliding-window layers are not the model's");
    }
  }
  for (int64_t t = 0; t < T; ++t) {
    int32_t tok = batch.token_ids[t], pos = batch.positions[t], s = batch.seq_index[t];
    if (tok < 0 || tok >= c.n_vocab) {
      return Status::invalid_argument("token id " + std::to_string(tok) + " is outside the vocabulary of " +
                                      std::to_string(c.n_vocab));
    }
    if (s < 0 || s >= static_cast<int32_t>(batch.sequences.size())) {
      return Status::invalid_argument("forward batch: token " + std::to_string(t) + " names a missing sequence");
    }
    if (pos < 0 || pos >= c.max_seq_len) {
      return Status::invalid_argument("position " + std::to_string(pos) + " is outside the context of " +
                                      std::to_string(c.max_seq_len) + " tokens");
    }
    const BatchSequence& seq = batch.sequences[s];
    if (ks.has_full_layers()) KOI_RETURN_IF_ERROR(check_table(seq.block_table, 0, pos, ks));
    if (ks.split()) {  // a windowed layer reads positions pos - window + 1 .. pos
      const int64_t first_block = std::max(0, pos - ks.window + 1) / ks.block_size;
      KOI_RETURN_IF_ERROR(check_table(seq.window_block_table, first_block, pos, ks));
    }
  }
  for (int32_t idx : batch.logit_indices) {
    if (idx < 0 || idx >= T) return Status::invalid_argument("forward batch: logit index out of range");
  }
  if (T == 0) return ok_status();
  gather_adapters(batch);

  const int64_t dim = c.dim, qd = c.q_dim(), kvd = c.kv_dim(), ffn = c.ffn_dim;
  ensure(x_, T * dim);
  ensure(xn_, T * dim);
  ensure(q_, T * qd);
  ensure(k_, T * kvd);
  ensure(v_, T * kvd);
  ensure(attn_out_, T * qd);
  ensure(proj_, T * dim);
  ensure(gate_, T * ffn);
  ensure(up_, T * ffn);

  // Embedding: x[t] = token_embd[token_ids[t]]   (T, dim)
  std::optional<trace::Span> span(std::in_place, trace_, "embed", "op");
  for (int64_t t = 0; t < T; ++t) {
    dequantize_row(weights_.token_embd.type, weights_.token_embd.row(batch.token_ids[t]), x_.data() + t * dim, dim);
  }
  if (c.embedding_scale != 1.0f) {
    for (int64_t i = 0; i < T * dim; ++i) x_[i] *= c.embedding_scale;
  }
  span.emplace(trace_, "rope angles", "op");
  // Every token's rotary angles, per frequency set: rope_cos_sin_[(set * T + t) * head_dim ...].
  const int64_t half = c.head_dim / 2;
  ensure(rope_cos_sin_, static_cast<int64_t>(inv_freq_.size()) * T * c.head_dim);
  over_tokens(T, pool, [&](int64_t t_begin, int64_t t_end) {
    for (size_t set = 0; set < inv_freq_.size(); ++set) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        float* cs = rope_cos_sin_.data() + (static_cast<int64_t>(set) * T + t) * c.head_dim;
        kernels::rope_angles(batch.positions[t], inv_freq_[set].data(), c.head_dim, cs, cs + half);
      }
    }
  });
  span.reset();

  // One token's residual: x += proj, proj first RMS-normalised in place by Gemma 2's post-norm.
  const auto add_residual = [&](float* x, float* proj, const TensorView& post_norm) {
    if (c.post_norms) kernels::rmsnorm(proj, post_norm.f32(), proj, dim, c.norm_eps);
    for (int64_t i = 0; i < dim; ++i) x[i] += proj[i];
  };
  for (int layer = 0; layer < c.n_layers; ++layer) {
    const LayerWeights& L = weights_.layers[layer];
    const PackedLayerWeights& P = packed_.layers[layer];
    const trace::Span layer_span(trace_, trace_ ? "layer " + std::to_string(layer) : std::string(), "layer");
    // Attention block. xn = rmsnorm(x)  (T, dim); q (T, q_dim); k, v (T, kv_dim)
    span.emplace(trace_, "qkv", "op");
    over_tokens(T, pool, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        kernels::rmsnorm(x_.data() + t * dim, L.attn_norm.f32(), xn_.data() + t * dim, dim, c.norm_eps);
      }
    });
    const kernels::PackedMatrix* qkv[] = {&P.wq, &P.wk, &P.wv};
    float* qkv_out[] = {q_.data(), k_.data(), v_.data()};
    kernels::matmul(qkv, xn_.data(), qkv_out, T, pool);
    add_lora(layer, LoraTarget::kQ, xn_.data(), q_.data(), T, pool);
    add_lora(layer, LoraTarget::kK, xn_.data(), k_.data(), T, pool);
    add_lora(layer, LoraTarget::kV, xn_.data(), v_.data(), T, pool);
    add_bias(q_.data(), L.bq, T, qd);
    add_bias(k_.data(), L.bk, T, kvd);
    add_bias(v_.data(), L.bv, T, kvd);
    if (c.qk_norm) {  // Qwen3: per-head Q/K RMSNorm, before rope
      per_head_rmsnorm(q_.data(), L.attn_q_norm, T, c.n_heads, c.head_dim, c.norm_eps);
      per_head_rmsnorm(k_.data(), L.attn_k_norm, T, c.n_kv_heads, c.head_dim, c.norm_eps);
    }
    // LongRoPE's attention factor multiplies cos and sin of q and k, so q.k by its square.
    const float q_factor = c.rope_attn_factor * c.rope_attn_factor;
    const float* layer_cos_sin = rope_cos_sin_.data() + inv_freq_of_layer_[layer] * T * c.head_dim;
    over_tokens(T, pool, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        const int32_t pos = batch.positions[t];
        const float* cs = layer_cos_sin + t * c.head_dim;
        kernels::rope_rotate(q_.data() + t * qd, c.n_heads, c.head_dim, cs, cs + half, c.rope_style);
        kernels::rope_rotate(k_.data() + t * kvd, c.n_kv_heads, c.head_dim, cs, cs + half, c.rope_style);
        if (q_factor != 1.0f) {
          for (int64_t i = 0; i < qd; ++i) q_[t * qd + i] *= q_factor;
        }
        const std::span<const int32_t> bt = table_of(batch.sequences[batch.seq_index[t]], ks, layer);
        const int64_t slot = static_cast<int64_t>(bt[pos / ks.block_size]) * ks.block_size + pos % ks.block_size;
        kv.write(layer, slot, k_.data() + t * kvd, v_.data() + t * kvd);
      }
    });
    if (batch.on_layer_kv_written) batch.on_layer_kv_written(layer);
    span.emplace(trace_, "attention", "op");
    attention(batch, kv, layer, pool);
    span.emplace(trace_, "wo", "op");
    kernels::matmul(P.wo, attn_out_.data(), proj_.data(), T, pool);
    add_lora(layer, LoraTarget::kO, attn_out_.data(), proj_.data(), T, pool);

    // Feed-forward block (SwiGLU, or GeGLU for Gemma): x += down(act(gate(xn)) * up(xn))   gate, up (T, ffn)
    span.emplace(trace_, "ffn up", "op");
    over_tokens(T, pool, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        add_residual(x_.data() + t * dim, proj_.data() + t * dim, L.attn_post_norm);
        kernels::rmsnorm(x_.data() + t * dim, L.ffn_norm.f32(), xn_.data() + t * dim, dim, c.norm_eps);
      }
    });
    if (c.moe.enabled()) {  // Mixtral / Qwen-MoE: routed SwiGLU experts (moe.h)
      moe_.forward(c, L.moe, xn_.data(), proj_.data(), T, pool);
    } else {
      const kernels::PackedMatrix* gate_up[] = {&P.w_gate, &P.w_up};
      float* gate_up_out[] = {gate_.data(), up_.data()};
      kernels::matmul(gate_up, xn_.data(), gate_up_out, T, pool);
      add_lora(layer, LoraTarget::kGate, xn_.data(), gate_.data(), T, pool);
      add_lora(layer, LoraTarget::kUp, xn_.data(), up_.data(), T, pool);
      if (c.ffn_activation == FfnActivation::kGeluTanh) {
        kernels::gelu_tanh_mul(gate_.data(), up_.data(), T * ffn, pool);
      } else {
        kernels::silu_mul(gate_.data(), up_.data(), T * ffn, pool);
      }
      span.emplace(trace_, "ffn down", "op");
      kernels::matmul(P.w_down, gate_.data(), proj_.data(), T, pool);
      add_lora(layer, LoraTarget::kDown, gate_.data(), proj_.data(), T, pool);
    }
    over_tokens(T, pool, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        add_residual(x_.data() + t * dim, proj_.data() + t * dim, L.ffn_post_norm);
      }
    });
    span.reset();  // inside the layer's span
  }
  span.emplace(trace_, "head", "layer");

  // Final norm and classifier, only for the rows whose logits are wanted.  (R, dim) -> (R, vocab)
  const int64_t R = static_cast<int64_t>(batch.logit_indices.size());
  ensure(logit_in_, R * dim);
  for (int64_t r = 0; r < R; ++r) {
    kernels::rmsnorm(x_.data() + batch.logit_indices[r] * dim, weights_.output_norm.f32(), logit_in_.data() + r * dim,
                     dim, c.norm_eps);
  }
  kernels::matmul(packed_.output, logit_in_.data(), logits, R, pool);
  if (c.final_softcap > 0.0f) kernels::softcap(logits, R * c.n_vocab, c.final_softcap);
  return ok_status();
}

void LlamaModel::gather_adapters(const ForwardBatch& batch) {
  lora_table_.clear();
  lora_row_.clear();
  std::vector<int32_t> seq_adapter(batch.sequences.size(), -1);
  for (size_t seq_idx = 0; seq_idx < batch.sequences.size(); ++seq_idx) {
    const LoraAdapter* lora = batch.sequences[seq_idx].lora;
    if (lora == nullptr) continue;
    auto it = std::find(lora_table_.begin(), lora_table_.end(), lora);
    seq_adapter[seq_idx] = static_cast<int32_t>(it - lora_table_.begin());
    if (it == lora_table_.end()) lora_table_.push_back(lora);
  }
  if (lora_table_.empty()) return;
  for (int32_t seq : batch.seq_index) lora_row_.push_back(seq_adapter[static_cast<size_t>(seq)]);
}

void LlamaModel::add_lora(int layer, LoraTarget target, const float* x, float* y, int64_t T, ThreadPool* pool) {
  if (lora_table_.empty()) return;
  lora_matrices_.clear();
  for (const LoraAdapter* lora : lora_table_) lora_matrices_.push_back(lora->matrices(layer, target));
  const auto [in, out] = lora_projection_shape(config_, target);
  kernels::lora_add(lora_matrices_, lora_row_.data(), x, in, y, out, T, pool);
}

// attn_out[t, h] = sum_j softmax_j(cap(q[t,h] . k[j, kvh] * scale)) v[j, kvh], over the
// positions j <= positions[t] of token t's sequence (the last `window` of them on a
// sliding-window layer), read from the paged cache; scale is 1/sqrt(head_dim) unless the
// config says otherwise, cap is the identity unless attn_softcap > 0.
// Plain causal layers (the default scale, no cap, no window: Llama, Qwen, Mistral without
// windows) run the fused kernel (kernels/attention.h), with the batch's tokens handed over as
// runs: maximal stretches of one sequence at consecutive positions (a prefill chunk, or one
// decode token). The other layers (Gemma's caps and windows, Mistral's and Phi-3's windows)
// take attention_general(), the per-(token, head) loop; the fused kernel does not take a cap
// or a window yet.
void LlamaModel::attention(const ForwardBatch& batch, KvCache& kv, int layer, ThreadPool* pool) {
  const ModelConfig& c = config_;
  if (c.attn_scale > 0.0f || c.attn_softcap > 0.0f || c.window_of(layer) > 0) {
    attention_general(batch, kv, layer, pool);
    return;
  }
  const int64_t T = batch.num_tokens();
  runs_.clear();
  for (int64_t t = 0; t < T; ++t) {
    const int32_t seq = batch.seq_index[t], pos = batch.positions[t];
    if (t > 0 && seq == batch.seq_index[t - 1] && pos == batch.positions[t - 1] + 1) {
      ++runs_.back().n_tokens;
      continue;
    }
    runs_.push_back({t, 1, pos, table_of(batch.sequences[seq], kv.shape(), layer)});
  }
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
  const kernels::PagedKv paged{kv.k(layer, 0), kv.v(layer, 0), kv.shape().slot_floats(), kv.shape().block_size,
                               kv.shape().dtype};
  kernels::attention(shape, q_.data(), paged, runs_, attn_out_.data(), pool);
}

void LlamaModel::attention_general(const ForwardBatch& batch, KvCache& kv, int layer, ThreadPool* pool) {
  const ModelConfig& c = config_;
  const int64_t T = batch.num_tokens(), hd = c.head_dim, qd = c.q_dim();
  const int block_size = kv.shape().block_size;
  const int group = c.n_heads / c.n_kv_heads;
  const float scale = c.attention_scale(), softcap = c.attn_softcap;
  const int window = c.window_of(layer);
  auto work = [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> scores, head_row;
    head_row.resize(static_cast<size_t>(hd));
    for (int64_t item = begin; item < end; ++item) {
      const int64_t t = item / c.n_heads, head_idx = item % c.n_heads;
      const int64_t kv_head = head_idx / group;
      const int32_t pos = batch.positions[t];
      const std::span<const int32_t> bt = table_of(batch.sequences[batch.seq_index[t]], kv.shape(), layer);
      const float* q = q_.data() + t * qd + head_idx * hd;
      const int32_t first = window > 0 ? std::max(0, pos - window + 1) : 0;  // scores[j - first]
      const int32_t n = pos + 1 - first;
      if (static_cast<int64_t>(scores.size()) < n) scores.resize(static_cast<size_t>(n));
      for (int32_t j = first; j <= pos; ++j) {
        const int64_t slot = static_cast<int64_t>(bt[j / block_size]) * block_size + j % block_size;
        scores[j - first] = kernels::dot(q, kv.k_head(layer, slot, kv_head, head_row.data()), hd) * scale;
      }
      if (softcap > 0.0f) kernels::softcap(scores.data(), n, softcap);
      kernels::softmax(scores.data(), n);
      float* out = attn_out_.data() + t * qd + head_idx * hd;
      std::fill_n(out, hd, 0.0f);
      for (int32_t j = first; j <= pos; ++j) {
        const int64_t slot = static_cast<int64_t>(bt[j / block_size]) * block_size + j % block_size;
        kernels::axpy(scores[j - first], kv.v_head(layer, slot, kv_head, head_row.data()), out, hd);
      }
    }
  };
  // Parallel only when there is enough work to pay for waking the pool (as in kernels/ops.cc).
  int64_t work_size = 0;
  for (int64_t t = 0; t < T; ++t) work_size += (batch.positions[t] + 1) * hd * c.n_heads * 2;
  if (pool != nullptr && work_size >= (int64_t{1} << 17)) {
    pool->parallel_for(T * c.n_heads, work);
  } else {
    work(0, T * c.n_heads);
  }
}

}  // namespace koi::model
