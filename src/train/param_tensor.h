// ParamTensor: one named tensor inside a flat parameter buffer (the model's, or the LoRA
// adapters'); Range: a span of such a buffer. Plain values.
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

// [begin, end) of a flat buffer (in floats, or items of a split; data_parallel.h split_range).
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

}  // namespace koi::train
