// Test helper: a PEFT LoRA adapter with random A and B, written as adapter_config.json and
// adapter_model.safetensors. Test code only; the library does not include it.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/file.h"
#include "base/random.h"
#include "model/lora.h"
#include "model/safetensors.h"

namespace koi::model {

// A PEFT adapter with random A and B (rank r) on `targets` of every layer, written to dir.
struct PeftAdapter {
  int rank = 4;
  double alpha = 8;
  std::vector<std::string> targets = {"q_proj", "v_proj", "o_proj", "down_proj"};
  std::map<std::string, std::vector<float>> tensors;  // row-major, PEFT names
  std::string extra_config;                           // more JSON members

  void fill(const ModelConfig& c, uint64_t seed) {
    Rng rng(seed);
    for (int layer = 0; layer < c.n_layers; ++layer) {
      for (const std::string& module : targets) {
        const LoraTarget t = *lora_target_from_name(module);
        const auto [in, out] = lora_projection_shape(c, t);
        const std::string name = "base_model.model." + lora_module_path(layer, t);
        for (auto& [suffix, n] : {std::pair{".lora_A.weight", rank * in}, std::pair{".lora_B.weight", out * rank}}) {
          std::vector<float>& v = tensors[name + suffix];
          for (int64_t i = 0; i < n; ++i) v.push_back(0.2f * (2.0f * rng.uniform_f() - 1.0f));
        }
      }
    }
  }
  Status write(const std::string& dir) const {
    std::string modules;
    for (const std::string& t : targets) modules += (modules.empty() ? "\"" : ",\"") + t + "\"";
    KOI_RETURN_IF_ERROR(write_file_atomic(path_join(dir, kLoraConfigFile),
                                          "{\"peft_type\":\"LORA\",\"r\":" + std::to_string(rank) +
                                              ",\"lora_alpha\":" + std::to_string(alpha) + ",\"target_modules\":[" +
                                              modules + "],\"bias\":\"none\"" + extra_config + "}"));
    std::vector<SafetensorsWriteTensor> out;
    for (const auto& [name, v] : tensors) {
      const bool is_a = name.ends_with(".lora_A.weight");
      const int64_t other = static_cast<int64_t>(v.size()) / rank;
      out.push_back({name, DType::kF32, is_a ? std::vector<int64_t>{rank, other} : std::vector<int64_t>{other, rank},
                     v.data()});
    }
    return write_safetensors(path_join(dir, kLoraWeightsFile), out);
  }
};

}  // namespace koi::model
