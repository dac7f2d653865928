// LoadedModel: everything needed to run a model file, loaded together: the forward pass
// (weights memory-mapped), its tokenizer, and its chat template and generation defaults.
// Accepts a GGUF file or a Hugging Face directory (config.json, safetensors,
// tokenizer.json, tokenizer_config.json, generation_config.json). Immutable after loading
// except for the model's scratch memory (LlamaModel::forward is single-threaded).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "model/llama.h"
#include "tokenizer/tokenizer.h"

namespace koi::engine {

struct GenerationDefaults {
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int> top_k;
};

struct LoadedModel {
  std::string path;
  std::unique_ptr<model::LlamaModel> model;
  tokenizer::Tokenizer tokenizer;
  GenerationDefaults defaults;
};

Result<LoadedModel> load_model(const std::string& path);

// The tokenizer of a model: GGUF metadata, or tokenizer.json (+ tokenizer_config.json) in
// a Hugging Face directory.
Result<tokenizer::TokenizerSpec> load_tokenizer_spec(const std::string& path);

}  // namespace koi::engine
