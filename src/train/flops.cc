#include "train/flops.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "train/linear.h"

namespace koi::train {

ModelFlops model_flops(const model::ModelConfig& c, int T) {
  const double d = c.dim, q = c.q_dim(), kv = c.kv_dim(), f = c.ffn_dim, ctx = (T + 1) / 2.0;
  ModelFlops m;
  m.layer.qkv = 2 * d * q + 2 * 2 * d * kv + (c.qkv_bias ? q + 2 * kv : 0.0);
  m.layer.attention = 2 * (2 * q * ctx);
  m.layer.output = 2 * q * d;
  m.layer.ffn = 3 * 2 * d * f;
  if (c.moe.enabled()) {  // the router, the k experts a token visits, the shared expert and its gate
    const model::MoeConfig& e = c.moe;
    m.layer.ffn = 2 * d * e.n_experts + e.n_experts_used * 3 * 2 * d * e.expert_ffn_dim +
                  (e.shared_ffn_dim > 0 ? 2 * d + 3 * 2 * d * e.shared_ffn_dim : 0.0);
  }
  m.n_layers = c.n_layers;
  m.lm_head = 2 * d * c.n_vocab;
  return m;
}

double train_flops_per_token(const ModelFlops& flops, bool frozen_base) {
  return (frozen_base ? 2.0 : 3.0) * flops.forward_per_token();
}

double measure_peak_flops(ThreadPool* pool, int repetitions) {
  constexpr int64_t N = 256, in = 1024, out = 1024;
  std::vector<float> x(N * in, 0.5f), w(out * in, 0.25f), y(N * out);
  double best = 1e30;
  for (int r = 0; r < std::max(1, repetitions); ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    linear_forward(pool, y.data(), x.data(), w.data(), nullptr, N, in, out);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return 2.0 * N * in * out / std::max(best, 1e-9);
}

}  // namespace koi::train
