// Random-weight models of any Llama-family shape: the test and benchmark models (a tiny one
// for batch-invariance tests, TinyLlama-1.1B's shape for speed comparisons with llama.cpp).
// Weights are uniform with the variance of a 1/sqrt(fan-in) init, norms near 1, in owned f32 buffers; a seed fixes them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace koi::model {

// Named shapes: "tiny" (dim 64, 2 layers, 4 heads, 2 KV heads, FFN 128, vocab 512, context
// 2048), "tiny-moe" (the same with a Mixtral-style FFN: 4 experts of 64, 2 per token) and "tinyllama" (TinyLlama-1.1B: dim 2048, 22 layers, 32 heads, 4 KV heads, FFN
// 5632, vocab 32000, context 2048); "tinyllama-8k" is the same with a context of 8192, for
// long-prompt benchmarks (pp4096).
std::optional<ModelConfig> named_shape(const std::string& name);

ModelWeights random_weights(const ModelConfig& config, uint64_t seed);

}  // namespace koi::model
