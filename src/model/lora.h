// LoRA adapters in PEFT's format (adapter_config.json + adapter_model.safetensors), the one
// home of that format for the trainer (train/lora.h writes and reads it) and the engine
// (LoraAdapter, served beside the base model: engine/lora_pool.h).
//
// An adapted projection computes y = x W^T + scale (x A^T) B^T with A (r, in) and B (out, r),
// scale = lora_alpha / r (lora_alpha / sqrt(r) with use_rslora). Tensor names are PEFT's:
//   base_model.model.model.layers.<l>.self_attn.q_proj.lora_A.weight   (r, in)
//   base_model.model.model.layers.<l>.mlp.down_proj.lora_B.weight      (out, r)
// Adapters hold the Hugging Face row order of q_proj and k_proj (rotate-half rope); a model
// stored for interleaved rope (GGUF "llama") gets those B rows permuted as it loads, the
// same permutation the GGUF export applies to the weights.
//
// A LoraAdapter is immutable after load() and safe to read from many threads. Every failure
// is a Status naming the file and the key or tensor at fault.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"
#include "kernels/lora.h"
#include "model/model_config.h"

namespace koi::model {

// The projections an adapter can sit on, with their PEFT module names.
enum class LoraTarget { kQ, kK, kV, kO, kGate, kUp, kDown };
constexpr int kNumLoraTargets = 7;

// "q" or "q_proj" (k, v, o, gate, up, down likewise); InvalidArgument listing the names.
Result<LoraTarget> lora_target_from_name(std::string_view name);
// "q_proj", "k_proj", ..., "down_proj".
const char* lora_module_name(LoraTarget target);
// "model.layers.<layer>.self_attn.q_proj": the base weight's name without ".weight".
std::string lora_module_path(int layer, LoraTarget target);
// (in, out) of a projection of a model of shape c.
std::pair<int64_t, int64_t> lora_projection_shape(const ModelConfig& c, LoraTarget target);

// What adapter_config.json says (PEFT's LoraConfig; only what Koi supports).
struct LoraFileConfig {
  int rank = 0;
  float alpha = 0.0f;
  bool rslora = false;              // use_rslora: scale alpha / sqrt(r)
  std::vector<LoraTarget> targets;  // target_modules
  float scale() const;
};

inline constexpr char kLoraConfigFile[] = "adapter_config.json";
inline constexpr char kLoraWeightsFile[] = "adapter_model.safetensors";

// Reads dir/adapter_config.json. PEFT features Koi does not serve (DoRA, biases,
// fan_in_fan_out, modules_to_save, per-layer rank or alpha patterns, layers_to_transform)
// are Unsupported errors naming the key.
Result<LoraFileConfig> read_lora_config(const std::string& dir);

class LoraAdapter {
 public:
  // Loads dir (adapter_config.json, adapter_model.safetensors with f32, f16 or bf16 tensors)
  // for a model of shape `model`: every tensor must be an A or B of a target module with the
  // model's shapes, and every target module of every layer must be there.
  static Result<LoraAdapter> load(const std::string& dir, const ModelConfig& model);
  LoraAdapter(LoraAdapter&&) = default;  // slots_ point into weights_, whose buffer moves along
  LoraAdapter& operator=(LoraAdapter&&) = default;
  LoraAdapter(const LoraAdapter&) = delete;
  LoraAdapter& operator=(const LoraAdapter&) = delete;

  const LoraFileConfig& config() const { return config_; }
  int rank() const { return config_.rank; }
  // Bytes of weights held (A and B of every adapted projection, f32).
  int64_t bytes() const { return static_cast<int64_t>(weights_.size() * sizeof(float)); }
  // The matrices of (layer, target) for kernels::lora_add; rank 0 when not adapted.
  kernels::LoraMatrices matrices(int layer, LoraTarget target) const {
    return slots_[static_cast<size_t>(layer) * kNumLoraTargets + static_cast<size_t>(target)];
  }

 private:
  LoraAdapter() = default;
  Status read_tensors(const std::string& path, const ModelConfig& model);

  LoraFileConfig config_;
  std::vector<float> weights_;                // every A, then B^T, of every slot
  std::vector<kernels::LoraMatrices> slots_;  // n_layers x kNumLoraTargets, into weights_
};

}  // namespace koi::model
