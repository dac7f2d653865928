// Loading a model's config and weights from what users have on disk:
//  - a GGUF file (architectures "llama" (with experts: Mixtral), "qwen2", "qwen3", "gemma2",
//    "qwen2moe" and "qwen3moe"; weights stay memory-mapped, stacked experts are sliced per expert),
//  - a Hugging Face directory (config.json + model.safetensors or a sharded
//    model.safetensors.index.json; weights stay memory-mapped).
// llama2.c checkpoints are not loaded directly: `koi convert` imports them into GGUF.
// Every failure is a one-line Status naming the file and what is wrong with it.
#pragma once

#include <string>

#include "base/status.h"
#include "model/model_config.h"
#include "model/weights.h"

namespace koi::model {

class GgufFile;
class SafetensorsModel;

enum class ModelFormat { kGguf, kHuggingFace, kLlama2c, kUnknown };

// Looks at the path (directory or magic bytes) and says what it is.
ModelFormat detect_format(const std::string& path);

struct LoadedWeights {
  ModelConfig config;
  ModelWeights weights;
};

// Loads any supported format; the weights are validated against the config.
Result<LoadedWeights> load_weights(const std::string& path);

Result<LoadedWeights> load_gguf_weights(const std::string& path);
Result<LoadedWeights> load_hf_weights(const std::string& dir);

// Parses a Hugging Face config.json text (for the architectures above).
Result<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& file_name);
// Reads the model hyper-parameters from GGUF metadata.
Result<ModelConfig> config_from_gguf(const GgufFile& gguf);

}  // namespace koi::model
