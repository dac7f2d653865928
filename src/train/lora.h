// LoRA adapters (Hu et al. 2021, as Hugging Face PEFT implements them) for LlamaTrain.
//
// An adapted projection y = x W^T keeps W frozen and learns two small matrices,
// A (r, in) and B (out, r):  y = x W^T + (alpha / r) (x A^T) B^T.  A starts uniform in
// +-1/sqrt(in) (PEFT's kaiming-uniform default), B at zero, so a new adapter changes nothing.
// The adapters of every layer and target live in one flat parameter buffer and one gradient
// buffer laid out by layout(), with PEFT's tensor names
//   base_model.model.model.layers.<l>.self_attn.q_proj.lora_A.weight   (r, in)
//   base_model.model.model.layers.<l>.self_attn.q_proj.lora_B.weight   (out, r)
// so that save() writes a directory PEFT loads (adapter_model.safetensors +
// adapter_config.json) and merge_into() folds them into the base weights (W += alpha/r B A).
//
// forward() and backward() are called by LlamaTrain around each adapted projection; forward
// keeps x A^T for the backward pass. Deterministic (kernels::matmul's fixed reduction order).
// Not thread-safe; the work runs on the caller's ThreadPool. Errors are Status values
// naming the file or the recipe key.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "model/lora.h"
#include "model/model_config.h"
#include "train/param_tensor.h"

namespace koi::train {

// The projections and their PEFT names live with the format, in model/lora.h.
using model::kNumLoraTargets;
using model::lora_module_name;
using model::lora_target_from_name;
using model::LoraTarget;

struct LoraConfig {
  int rank = 0;  // 0: no adapters (train every weight)
  float alpha = 0.0f;  // 0: the rank (scale 1)
  std::vector<LoraTarget> targets = {LoraTarget::kQ, LoraTarget::kK, LoraTarget::kV, LoraTarget::kO};

  float scale() const { return (alpha > 0.0f ? alpha : static_cast<float>(rank)) / static_cast<float>(rank); }
};

class LoraAdapters {
 public:
  // The adapters of config.targets on every layer of a model of shape `model`, zero-filled.
  static Result<LoraAdapters> create(const model::ModelConfig& model, const LoraConfig& config);
  // Reads a directory written by save() (adapter_config.json, adapter_model.safetensors)
  // for a model of shape `model`.
  static Result<LoraAdapters> load(const std::string& dir, const model::ModelConfig& model);

  const LoraConfig& config() const { return config_; }
  const std::vector<ParamTensor>& layout() const { return layout_; }
  std::vector<float>& params() { return params_; }
  const std::vector<float>& params() const { return params_; }
  std::vector<float>& grads() { return grads_; }
  bool adapts(LoraTarget target) const { return adapted_[static_cast<int>(target)]; }

  // A uniform in +-1/sqrt(in), B zero.
  void init_random(uint64_t seed);
  void zero_grad();

  // y (N, out) += scale (x A^T) B^T for adapter (layer, target); x is (N, in).
  void forward(ThreadPool* pool, int layer, LoraTarget target, const float* x, float* y, int64_t N);
  // After forward() of the same batch, with dy = d loss / d y (N, out):
  //   dB += scale dy^T (x A^T);  du = scale dy B;  dA += du^T x;  dx += du A.
  void backward(ThreadPool* pool, int layer, LoraTarget target, const float* x, const float* dy, float* dx,
                int64_t N);

  // base_params (laid out by base_layout, the model's param_layout) W += scale B A.
  void merge_into(std::vector<float>* base_params, const std::vector<ParamTensor>& base_layout) const;
  // Writes dir/adapter_model.safetensors and dir/adapter_config.json (PEFT's format).
  Status save(const std::string& dir) const;
  // Reads dir/adapter_model.safetensors into params(); every tensor must match layout().
  Status load_params(const std::string& dir);

 private:
  // One adapted projection: its A and B in layout_, its shape and its kept activation.
  struct Slot {
    int a = -1, b = -1;  // indices into layout_; -1: not adapted
    int64_t in = 0, out = 0;
    std::vector<float> u;  // (N, r) x A^T of the last forward()
  };
  LoraAdapters(model::ModelConfig model, LoraConfig config);
  Slot& slot(int layer, LoraTarget target) {
    return slots_[static_cast<size_t>(layer) * kNumLoraTargets + static_cast<size_t>(target)];
  }

  model::ModelConfig model_;
  LoraConfig config_;
  std::array<bool, kNumLoraTargets> adapted_{};
  std::vector<ParamTensor> layout_;
  std::vector<float> params_, grads_;
  std::vector<Slot> slots_;  // n_layers x kNumLoraTargets
  std::vector<float> tmp_, du_;
};

}  // namespace koi::train
