// Export of a loaded model (any source format) into GGUF metadata and tensors, in the
// layout llama.cpp uses: architecture "llama" (Llama, Mistral, SmolLM, TinyLlama, llama2.c
// imports) stores Q/K rows permuted for interleaved rope; "qwen2" keeps the Hugging Face
// (neox) order. Matrices are converted to the requested weight type; a matrix whose rows
// do not divide into 32-value blocks falls back to f16 for quantized types (as llama.cpp
// does), norms and biases stay f32. Tokenizer metadata is added separately
// (tokenizer::spec_to_gguf).
#pragma once

#include <string>

#include "base/status.h"
#include "model/gguf.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tensor/dtype.h"

namespace koi::model {

struct ExportStats {
  int tensors = 0;
  int fallback_tensors = 0;  // quantized type requested but rows not a multiple of 32
  int64_t bytes = 0;         // tensor bytes written
};

// Adds the model's metadata and converted tensors to the writer (which owns the converted
// bytes afterwards). `weights` only needs to stay valid during the call.
Result<ExportStats> add_model_to_gguf(const ModelConfig& config, const ModelWeights& weights, DType weight_type,
                                      GgufWriter& writer);

}  // namespace koi::model
