// Import of llama2.c checkpoints (Karpathy's "run.c" format, version 0): a header of seven
// int32 (dim, hidden_dim, n_layers, n_heads, n_kv_heads, vocab_size, seq_len; a negative
// vocab_size means the classifier is not shared with the embedding), then f32 weights in a
// fixed order. The weights are copied into owned buffers (the file is small by nature and
// this path exists only for `koi convert`). llama2.c rotates adjacent pairs with theta
// 10000 and uses RMSNorm epsilon 1e-5.
#pragma once

#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace koi::model {

struct Llama2cModel {
  ModelConfig config;
  ModelWeights weights;
};

Result<Llama2cModel> load_llama2c(const std::string& path);

}  // namespace koi::model
