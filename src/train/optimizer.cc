#include "train/optimizer.h"

#include <cmath>

namespace koi::train {
namespace {

// Tensors smaller than this update on the calling thread (waking the pool costs more).
constexpr int64_t kMinParallelParams = 16384;

// The AdamW update of n parameters (PyTorch's operation order).
void update_range(float* __restrict p, float* __restrict m, float* __restrict v, const float* __restrict g, int64_t n,
                  float b1, float b2, float decay, float step_size, float bias2_sqrt, float eps) {
  for (int64_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float denom = std::sqrt(v[i]) / bias2_sqrt + eps;
    p[i] = p[i] * decay - step_size * m[i] / denom;
  }
}

}  // namespace

AdamW::AdamW(AdamWConfig config, int64_t num_params)
    : config_(config), m_(static_cast<size_t>(num_params), 0.0f), v_(static_cast<size_t>(num_params), 0.0f) {}

void AdamW::step(std::vector<float>& params, const std::vector<float>& grads, const std::vector<ParamTensor>& layout,
                 float lr, ThreadPool* pool) {
  ++steps_;
  const float b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(steps_));
  const float step_size = static_cast<float>(lr / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  for (const ParamTensor& t : layout) {
    const float decay = t.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
    const auto update = [&](int64_t begin, int64_t end) {
      const int64_t i = t.offset + begin;
      update_range(params.data() + i, m_.data() + i, v_.data() + i, grads.data() + i, end - begin, b1, b2, decay,
                   step_size, bias2_sqrt, config_.eps);
    };
    if (pool != nullptr && t.size >= kMinParallelParams) {
      pool->parallel_for(t.size, update);
    } else {
      update(0, t.size);
    }
  }
}

double sum_of_squares(const float* x, int64_t n) {
  // Eight running sums combined in a fixed order: vectorisable, and the same for any run.
  double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int64_t k = 0; k < 8; ++k) acc[k] += static_cast<double>(x[i + k]) * x[i + k];
  }
  double ss = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  return ss;
}

void scale_to_max_norm(float* grads, int64_t n, float norm, float max_norm) {
  if (max_norm > 0.0f && norm > max_norm) {
    const float coef = max_norm / (norm + 1e-6f);
    for (int64_t i = 0; i < n; ++i) grads[i] *= coef;
  }
}

float clip_grad_norm(std::vector<float>& grads, float max_norm) {
  const float norm = static_cast<float>(std::sqrt(sum_of_squares(grads.data(), static_cast<int64_t>(grads.size()))));
  scale_to_max_norm(grads, norm, max_norm);
  return norm;
}

float lr_at(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.lr * static_cast<float>(step + 1) / static_cast<float>(s.warmup_steps + 1);
  }
  if (step > s.decay_steps || s.decay_steps <= s.warmup_steps) return s.min_lr;
  const double ratio = static_cast<double>(step - s.warmup_steps) / static_cast<double>(s.decay_steps - s.warmup_steps);
  const double coeff = 0.5 * (1.0 + std::cos(M_PI * ratio));
  return static_cast<float>(s.min_lr + coeff * (s.lr - s.min_lr));
}

}  // namespace koi::train
