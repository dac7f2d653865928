#include "model/random_model.h"

#include <cmath>
#include <vector>

#include "base/random.h"

namespace koi::model {

std::optional<ModelConfig> named_shape(const std::string& name) {
  ModelConfig c;
  c.arch = "llama";
  c.rope_style = kernels::RopeStyle::kInterleaved;
  c.norm_eps = 1e-5f;
  c.max_seq_len = 2048;
  if (name == "tiny" || name == "tiny-moe") {
    c.name = "random-" + name;
    c.dim = 64, c.n_layers = 2, c.n_heads = 4, c.n_kv_heads = 2, c.ffn_dim = 128, c.n_vocab = 512;
    if (name == "tiny-moe") c.moe = {.n_experts = 4, .n_experts_used = 2, .expert_ffn_dim = 64};
  } else if (name == "tinyllama" || name == "tinyllama-8k") {
    c.name = name == "tinyllama" ? "random-tinyllama-1.1b" : "random-tinyllama-1.1b-8k";
    c.dim = 2048, c.n_layers = 22, c.n_heads = 32, c.n_kv_heads = 4, c.ffn_dim = 5632, c.n_vocab = 32000;
    if (name == "tinyllama-8k") c.max_seq_len = 8192;
  } else {
    return std::nullopt;
  }
  c.head_dim = c.dim / c.n_heads;
  return c;
}

ModelWeights random_weights(const ModelConfig& c, uint64_t seed) {
  ModelWeights w;
  uint64_t tensor_idx = 0;
  // Each tensor has its own stream (seed, index) so the result does not depend on threads.
  auto make = [&](std::initializer_list<int64_t> ne, float scale, float offset) {
    TensorView v = make_view(DType::kF32, ne, nullptr);
    std::vector<float> data(static_cast<size_t>(v.num_elements()));
    Rng rng(seed * 1000003 + tensor_idx++);
    // Uniform with the variance of N(0, scale^2): as good for a random model, and fast enough
    // for a billion weights.
    const float half_width = scale * 1.7320508f;
    for (float& x : data) x = offset + half_width * (2.0f * rng.uniform_f() - 1.0f);
    v.data = w.own(std::move(data));
    return v;
  };
  const float s_in = 1.0f / std::sqrt(static_cast<float>(c.dim));
  const float s_ffn = 1.0f / std::sqrt(static_cast<float>(c.ffn_dim));
  w.token_embd = make({c.dim, c.n_vocab}, 1.0f, 0.0f);
  w.output_norm = make({c.dim}, 0.05f, 1.0f);
  w.output = c.tied_embeddings ? w.token_embd : make({c.dim, c.n_vocab}, s_in, 0.0f);
  w.layers.resize(static_cast<size_t>(c.n_layers));
  for (LayerWeights& L : w.layers) {
    L.attn_norm = make({c.dim}, 0.05f, 1.0f);
    L.wq = make({c.dim, c.q_dim()}, s_in, 0.0f);
    L.wk = make({c.dim, c.kv_dim()}, s_in, 0.0f);
    L.wv = make({c.dim, c.kv_dim()}, s_in, 0.0f);
    L.wo = make({c.q_dim(), c.dim}, s_in, 0.0f);
    if (c.qkv_bias) {
      L.bq = make({c.q_dim()}, 0.1f, 0.0f);
      L.bk = make({c.kv_dim()}, 0.1f, 0.0f);
      L.bv = make({c.kv_dim()}, 0.1f, 0.0f);
    }
    if (c.qk_norm) {
      L.attn_q_norm = make({c.head_dim}, 0.05f, 1.0f);
      L.attn_k_norm = make({c.head_dim}, 0.05f, 1.0f);
    }
    L.ffn_norm = make({c.dim}, 0.05f, 1.0f);
    if (c.post_norms) {
      L.attn_post_norm = make({c.dim}, 0.05f, 1.0f);
      L.ffn_post_norm = make({c.dim}, 0.05f, 1.0f);
    }
    if (c.moe.enabled()) {
      const MoeConfig& m = c.moe;
      L.moe.router = make({c.dim, m.n_experts}, s_in, 0.0f);
      for (int e = 0; e < m.n_experts; ++e) {
        L.moe.gate.push_back(make({c.dim, m.expert_ffn_dim}, s_in, 0.0f));
        L.moe.up.push_back(make({c.dim, m.expert_ffn_dim}, s_in, 0.0f));
        L.moe.down.push_back(make({m.expert_ffn_dim, c.dim}, 1.0f / std::sqrt(static_cast<float>(m.expert_ffn_dim)), 0.0f));
      }
      if (m.shared_ffn_dim > 0) {
        const float s_shared = 1.0f / std::sqrt(static_cast<float>(m.shared_ffn_dim));
        L.moe.shared_gate_inp = make({c.dim}, s_in, 0.0f);
        L.moe.shared_gate = make({c.dim, m.shared_ffn_dim}, s_in, 0.0f);
        L.moe.shared_up = make({c.dim, m.shared_ffn_dim}, s_in, 0.0f);
        L.moe.shared_down = make({m.shared_ffn_dim, c.dim}, s_shared, 0.0f);
      }
      continue;
    }
    L.w_gate = make({c.dim, c.ffn_dim}, s_in, 0.0f);
    L.w_up = make({c.dim, c.ffn_dim}, s_in, 0.0f);
    L.w_down = make({c.ffn_dim, c.dim}, s_ffn, 0.0f);
  }
  return w;
}

}  // namespace koi::model
