// Checkpoints of a training run: everything needed to continue it bit for bit.
//
// A checkpoint is a directory RUN/ckpt-<step, 8 digits>/ holding
//   config.json        the model shape, Hugging Face style (the directory loads as a model),
//   model.safetensors  the weights (Hugging Face names, f32),
//   optimizer.safetensors  AdamW's m and v ("m.<name>", "v.<name>"),
//   state.json         step, AdamW step count, data-loader position, character vocabulary,
//                      the writer's layout (device mesh, ZeRO stage),
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
//
// The step loop does not wait for the disk: snapshot_checkpoint copies what a checkpoint
// holds (weights, AdamW's moments, the TrainState: a memcpy) and a CheckpointWriter writes
// it on its own thread while training goes on, then prunes old checkpoints.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <thread>
#include <utility>
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
  // The layout of the run that saved it, recorded in state.json as one "layout" record:
  // {"tensors": "full", "mesh": "dp=2 tp=2 pp=1 ep=1" (mesh.h), "zero": 3}. For the record: a
  // checkpoint always holds whole tensors (the ranks' shards are gathered at save and sliced
  // at load), so it resumes under any mesh and ZeRO stage.
  std::string mesh = "dp=1 tp=1 pp=1 ep=1";
  int zero_stage = 0;
};

// The Hugging Face config.json of a model shape (LlamaForCausalLM, attention_bias for qkv bias).
std::string hf_config_json(const model::ModelConfig& config);

// Writes params (laid out by layout) as a safetensors file of f32 tensors, prefix + name each.
Status write_params(const std::string& path, const std::vector<ParamTensor>& layout, const std::vector<float>& data,
                    const std::string& prefix = "");
// Reads them back into data (already sized); every tensor must be present with its shape.
Status read_params(const std::string& path, const std::vector<ParamTensor>& layout, std::vector<float>* data,
                   const std::string& prefix = "");
// The same checks, handing each tensor to take(index in layout, its t.size floats) while the
// file is mapped instead of copying it.
Status for_each_param(const std::string& path, const std::vector<ParamTensor>& layout,
                      const std::function<void(size_t, const float*)>& take, const std::string& prefix = "");

// Everything a checkpoint holds, copied out of the run.
struct CheckpointSnapshot {
  TrainState state;
  model::ModelConfig config;
  std::vector<ParamTensor> layout;  // of params
  std::vector<float> params;
  std::optional<LoraAdapters> lora;         // the adapters of a LoRA run (a copy)
  std::vector<ParamTensor> moments_layout;  // "m.<name>" then "v.<name>" over moments
  std::vector<float> moments;               // AdamW's m, then v
  int64_t adam_steps = 0;
};
CheckpointSnapshot snapshot_checkpoint(const TrainState& state, const LlamaTrain& model, AdamW& optimizer);

// Writes a snapshot as RUN/ckpt-<step>; before_commit (a test seam: a slow disk) runs after
// the files are written, before COMPLETE and the rename. Returns the checkpoint's directory.
Result<std::string> write_checkpoint(const std::string& run_dir, const CheckpointSnapshot& snapshot,
                                     const std::function<void()>& before_commit = {});
// Snapshot and write on the calling thread.
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
// A part of every tensor: the weights into *params and AdamW's m and v into *optimizer, each
// tensor (index i of the whole model's layout, as the checkpoint holds it) handed to
// slice(i, whole tensor, destination vector) straight from the mapped file, so no whole model
// is built (a tensor-parallel rank's shard, TensorParallel::slice_tensor).
Status load_checkpoint_sliced(const std::string& dir, const std::vector<ParamTensor>& layout,
                              const std::function<void(size_t, const float*, float*)>& slice,
                              std::vector<float>* params, AdamW* optimizer);
// Removes all but the newest `keep` complete checkpoints (keep <= 0 keeps all), and any ckpt-*
// folder older than the newest complete one that has no completion marker (what a process
// killed while pruning leaves).
void prune_checkpoints(const std::string& run_dir, int keep);

// Writes snapshots on a background thread, one at a time: submit() first waits for the
// write in flight (a second checkpoint waits for the first), so at most one snapshot
// besides the live state is held. After each write it prunes to the newest `keep` and
// prints the checkpoint, its write time and stall_ms (the caller's snapshot time) to
// stderr. A failed write is returned by the next submit() or by finish(); the destructor
// waits for the write in flight. Methods are called from one thread (the step loop).
class CheckpointWriter {
 public:
  // before_commit(step): passed to write_checkpoint (a test seam).
  CheckpointWriter(std::string run_dir, int keep, std::function<void(int64_t step)> before_commit = {});
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Waits for the write in flight; fails with its error, else starts writing snapshot.
  Status submit(CheckpointSnapshot snapshot, double stall_ms);
  // Waits for the write in flight; the newest checkpoint written (empty when none) or the
  // error of the last write.
  Result<std::string> finish();
  // Called on the writer thread after each successful write with its wall time in seconds
  // (the trainer's koi_train_checkpoint_write_seconds). Set before the first submit().
  void on_written(std::function<void(double seconds)> f) { on_written_ = std::move(f); }

 private:
  std::string run_dir_;
  int keep_;
  std::function<void(int64_t step)> before_commit_;
  std::function<void(double seconds)> on_written_;
  std::thread thread_;
  Result<std::string> written_ = std::string();  // set by thread_, read after joining it
};

}  // namespace koi::train
