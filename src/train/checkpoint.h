// Checkpoints of a training run: everything needed to continue it bit for bit.
//
// A checkpoint is a directory RUN/ckpt-<step, 8 digits>/ holding
//   config.json        the model shape, Hugging Face style (the directory loads as a model),
//   model.safetensors  the weights (Hugging Face names, f32),
//   optimizer.safetensors  AdamW's m and v ("m.<name>", "v.<name>"),
//   state.json         step, AdamW step count, data-loader position, character vocabulary,
//   tokenizer.gguf     a fine-tuned model's tokenizer (GGUF tokenizer metadata, no tensors),
//   adapter_model.safetensors, adapter_config.json   the LoRA adapters (PEFT format), when
//                      the run trains adapters; optimizer.safetensors then holds their moments
//                      and model.safetensors the frozen base,
//   COMPLETE           the completion marker, written last.
// save_checkpoint writes into RUN/.ckpt-<step>.tmp (each file fsynced), writes COMPLETE,
// renames the directory into place and fsyncs RUN: a crash at any moment leaves either a
// complete checkpoint or none (a stale .tmp is removed by the next save). Only directories
// with COMPLETE count as checkpoints. Plain functions; not safe to call concurrently on the
// same run directory. Errors name the file.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "model/model_config.h"
#include "tokenizer/spec.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {

struct TrainState {
  int64_t step = 0;              // optimizer steps completed
  uint64_t loader_position = 0;  // batches the training data loader has handed out
  std::vector<std::string> chars;  // character vocabulary (empty for other tokenizers)
  std::optional<tokenizer::TokenizerSpec> tokenizer = std::nullopt;  // the tokenizer of the model fine-tuned
};

// The Hugging Face config.json of a model shape (LlamaForCausalLM, attention_bias for qkv bias).
std::string hf_config_json(const model::ModelConfig& config);

// Writes params (laid out by layout) as a safetensors file of f32 tensors, prefix + name each.
Status write_params(const std::string& path, const std::vector<ParamTensor>& layout, const std::vector<float>& data,
                    const std::string& prefix = "");
// Reads them back into data (already sized); every tensor must be present with its shape.
Status read_params(const std::string& path, const std::vector<ParamTensor>& layout, std::vector<float>* data,
                   const std::string& prefix = "");

// Returns the new checkpoint's directory.
Result<std::string> save_checkpoint(const std::string& run_dir, const TrainState& state, const LlamaTrain& model,
                                    AdamW& optimizer);
// The newest complete checkpoint of run_dir; NotFound when there is none.
Result<std::string> latest_checkpoint(const std::string& run_dir);
// Reads config.json and state.json of a checkpoint.
Result<model::ModelConfig> read_checkpoint_config(const std::string& dir);
Result<TrainState> read_checkpoint_state(const std::string& dir);
// Loads weights (and the adapters of a model with LoRA) and the optimizer state into objects
// created with the checkpoint's config.
Status load_checkpoint(const std::string& dir, LlamaTrain* model, AdamW* optimizer);
// Removes all but the newest `keep` complete checkpoints (keep <= 0 keeps all).
void prune_checkpoints(const std::string& run_dir, int keep);

}  // namespace koi::train
