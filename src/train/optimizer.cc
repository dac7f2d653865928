#include "train/optimizer.h"

#include <cmath>

namespace koi::train {

AdamW::AdamW(AdamWConfig config, int64_t num_params)
    : config_(config), m_(static_cast<size_t>(num_params), 0.0f), v_(static_cast<size_t>(num_params), 0.0f) {}

void AdamW::step(std::vector<float>& params, const std::vector<float>& grads, const std::vector<ParamTensor>& layout,
                 float lr) {
  ++steps_;
  const float b1 = config_.beta1, b2 = config_.beta2;
  const double bias1 = 1.0 - std::pow(static_cast<double>(b1), static_cast<double>(steps_));
  const double bias2 = 1.0 - std::pow(static_cast<double>(b2), static_cast<double>(steps_));
  const float step_size = static_cast<float>(lr / bias1);
  const float bias2_sqrt = static_cast<float>(std::sqrt(bias2));
  for (const ParamTensor& t : layout) {
    const float decay = t.decay ? 1.0f - lr * config_.weight_decay : 1.0f;
    for (int64_t i = t.offset; i < t.offset + t.size; ++i) {
      const float g = grads[i];
      m_[i] = b1 * m_[i] + (1.0f - b1) * g;
      v_[i] = b2 * v_[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(v_[i]) / bias2_sqrt + config_.eps;
      params[i] = params[i] * decay - step_size * m_[i] / denom;
    }
  }
}

float clip_grad_norm(std::vector<float>& grads, float max_norm) {
  double ss = 0.0;
  for (float g : grads) ss += static_cast<double>(g) * g;
  const float norm = static_cast<float>(std::sqrt(ss));
  if (max_norm > 0.0f && norm > max_norm) {
    const float coef = max_norm / (norm + 1e-6f);
    for (float& g : grads) g *= coef;
  }
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
