// Fine-tuning: the starting point of a run that continues an existing model
// (`model: {init_from: PATH}` in a recipe): its shape, its weights and its tokenizer.
//
// LlamaTrain works in the Hugging Face (rotate-half, "neox") rope layout. A GGUF "llama"
// model (llama.cpp's convention, and every llama2.c import) stores the Q/K rows of each head
// permuted for interleaved rope; load_base_weights permutes them back, so checkpoints are
// Hugging Face directories as for any run, adapters get PEFT's layout, and the GGUF export
// permutes them again. Plain functions; errors name the file.
#pragma once

#include <string>

#include "base/status.h"
#include "kernels/ops.h"
#include "model/model_config.h"
#include "model/weights.h"
#include "tokenizer/spec.h"
#include "train/llama_train.h"

namespace koi::train {

struct BaseModel {
  model::ModelConfig config;       // the training shape: rope layout kNeox
  model::ModelWeights weights;     // as stored (memory-mapped, any dtype)
  kernels::RopeStyle stored_rope;  // the layout of `weights`
  tokenizer::TokenizerSpec tokenizer;
};

// A GGUF file or a Hugging Face directory with its tokenizer.
Result<BaseModel> load_base_model(const std::string& path);

// Copies base.weights into model (created with base.config) as f32, in the rotate-half layout.
Status load_base_weights(const BaseModel& base, LlamaTrain* model);

}  // namespace koi::train
