// The optimizer side of a training step: AdamW with decoupled weight decay (PyTorch's
// torch.optim.AdamW, step for step), global gradient-norm clipping
// (torch.nn.utils.clip_grad_norm_) and the warmup + cosine learning-rate schedule of
// nanoGPT. AdamW owns its moment buffers (m, v) and step count, which a checkpoint saves
// and restores. Deterministic: every reduction runs in a fixed order. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "train/llama_train.h"

namespace koi::train {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;  // applied to the tensors whose ParamTensor::decay is set
};

class AdamW {
 public:
  AdamW(AdamWConfig config, int64_t num_params);

  // One update of params with grads at learning rate lr; layout says which tensors decay.
  // Each element's update is independent, so running it on a pool changes no result.
  void step(std::vector<float>& params, const std::vector<float>& grads, const std::vector<ParamTensor>& layout,
            float lr, ThreadPool* pool = nullptr);

  int64_t steps() const { return steps_; }
  std::vector<float>& m() { return m_; }
  std::vector<float>& v() { return v_; }
  void set_steps(int64_t steps) { steps_ = steps; }

 private:
  AdamWConfig config_;
  std::vector<float> m_, v_;
  int64_t steps_ = 0;
};

// Scales grads so that their global L2 norm is at most max_norm (max_norm <= 0: no
// clipping); returns the norm before clipping.
float clip_grad_norm(std::vector<float>& grads, float max_norm);
// Its two halves, for gradients held in parts (tensor-parallel shards, ZeRO parts, pipeline
// stages): the sum of squares of x[0, n) in clip_grad_norm's fixed order, and the scaling of
// grads[0, n) by max_norm / (norm + 1e-6) when norm > max_norm > 0.
double sum_of_squares(const float* x, int64_t n);
void scale_to_max_norm(float* grads, int64_t n, float norm, float max_norm);
inline void scale_to_max_norm(std::vector<float>& grads, float norm, float max_norm) {
  scale_to_max_norm(grads.data(), static_cast<int64_t>(grads.size()), norm, max_norm);
}

struct LrSchedule {
  float lr = 1e-3f;
  float min_lr = 1e-4f;
  int warmup_steps = 0;
  int decay_steps = 0;  // cosine from lr at warmup_steps to min_lr at decay_steps; then min_lr
};

// nanoGPT's get_lr(it): linear warmup lr * (step + 1) / (warmup + 1), then cosine decay.
float lr_at(const LrSchedule& schedule, int64_t step);

}  // namespace koi::train
