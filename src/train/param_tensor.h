// ParamTensor: one named tensor inside a flat parameter buffer (the model's, or the LoRA
// adapters'). A plain value.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace koi::train {

struct ParamTensor {
  std::string name;            // Hugging Face name: "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;  // row-major, outermost first
  int64_t offset = 0;          // in floats
  int64_t size = 0;
  bool decay = false;          // weight decay applies (matrices and embeddings, not norms or biases)
};

}  // namespace koi::train
