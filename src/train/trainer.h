// The trainer: a training run from a YAML recipe, start to finish.
//
// run_training() takes the run's tokenizer (the character vocabulary of the corpus, a
// tokenizer file or directory, or the fine-tuned model's), tokenizes the corpus once into
// token shards (data.h; OUT/data by default, reused while the corpus and the tokenizer stay
// the same), splits the token sequence into train and validation parts (the first
// 1 - val_fraction for training, as nanoGPT), then runs the step loop: draw grad_accum
// batches, forward and backward, clip the gradient norm, set the learning rate of the
// schedule, AdamW step. It prints a progress line (step, loss, learning rate, tokens/s,
// time left) to stderr, appends metrics as JSON lines to OUT/metrics.jsonl, keeps the
// latest in the Prometheus text format in OUT/metrics.prom (rewritten at each logged step
// and evaluation), estimates the validation loss every eval_interval steps and at the end, and writes an atomic
// checkpoint (checkpoint.h) every checkpoint_interval steps, when *stop becomes true
// (SIGTERM) and at the end, keeping the newest keep_checkpoints. The loop only copies the
// state for a checkpoint; a background thread writes it while training goes on (a failed
// write fails the run at the next checkpoint or at the end), and the run returns after the
// last write has finished. With resume it continues from the newest complete checkpoint of
// OUT; the result is bit-identical to a run that was never interrupted (the loader's
// batches depend only on (seed, position), every kernel is deterministic).
// Fine-tuning (init_from) takes the shape, the weights and the tokenizer of an existing
// model instead (finetune.h); with lora.rank > 0 the base stays frozen and only LoRA
// adapters are trained (lora.h).
// Data parallel: given a Communicator of N ranks (`mpirun -np N koi train`), each rank
// computes batch_size / N sequences of every batch, gradients are summed by bucketed
// allreduce, AdamW runs on every rank or, with zero_stage 1, on each rank's shard
// (data_parallel.h); with zero_stage 2 or 3 gradients (and weights) are sharded per layer
// instead (zero.h), and after the steps every rank's memory is reported; rank 0 alone prints, writes metrics (with every rank's step time, and
// flags stragglers) and writes checkpoints, which hold the full state and so resume on any
// number of ranks. A collective that hangs fails the run with DeadlineExceeded (collectives.h).
// Under a device mesh (config.mesh) the batch splits over the dp group only and every layer
// over the tp group (tensor_parallel.h); checkpoints hold full tensors, so they resume under
// any mesh.
// Pipeline parallel (mesh pp > 1): the pp group's ranks are the stages of one pipeline, each
// dp rank's part of a batch runs through it in micro-batches (pipeline.h; every stage may be
// tensor parallel inside); the last stage has the loss (its tp rank 0 reports it), the step
// log and metrics add the measured bubble beside (p-1)/(m+p-1), and checkpoints gather the
// stages. Expert parallel (mesh ep > 1, alone): the experts split over the ranks, which also
// split the batch. check_parallel_layout refuses the combinations not built yet.
// One run per process; the work runs on a ThreadPool of `threads` threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/metrics.h"
#include "base/status.h"
#include "base/trace.h"
#include "model/model_config.h"
#include "train/collectives.h"
#include "train/lora.h"
#include "train/mesh.h"
#include "train/optimizer.h"
#include "train/pipeline.h"

namespace koi::train {

struct TrainConfig {
  model::ModelConfig model;  // n_vocab comes from the data; max_seq_len is the context
  std::string init_from;     // fine-tune this model (GGUF or HF directory) instead of `model`
  LoraConfig lora;           // rank > 0: train LoRA adapters of init_from only
  std::vector<std::string> text_paths;  // the corpus (UTF-8 text files, tokenized in order)
  // data.tokenizer: a tokenizer (HF directory with tokenizer.json, .gguf, llama2.c
  // tokenizer.bin) for a new model; empty: the character vocabulary (or init_from's).
  std::string tokenizer_path;
  std::string shards_dir;  // token shards; empty: OUT/data
  int64_t shard_tokens = 100'000'000;
  double val_fraction = 0.1;
  int batch_size = 12;
  int seq_len = 0;  // 0: the context (of init_from's model when fine-tuning)
  int steps = 1000;
  int grad_accum = 1;
  LrSchedule schedule;
  AdamWConfig adam;
  float grad_clip = 1.0f;
  uint64_t seed = 1337;
  int eval_interval = 0;  // 0: only at the end
  int eval_iters = 20;
  int log_interval = 10;
  int checkpoint_interval = 0;  // 0: only at the end (and on stop)
  int keep_checkpoints = 2;
  std::string out_dir;
  int threads = 0;  // 0: the physical cores
  // 1: shard AdamW's m and v over the data-parallel ranks (ZeRO-1); 2: and the gradients
  // (ZeRO-2); 3: and the weights, gathered per layer (ZeRO-3/FSDP) (zero.h).
  int zero_stage = 0;
  bool overlap = true;      // ZeRO-2/3: non-blocking collectives overlapped with compute
  double bucket_mb = 25.0;  // size of a gradient allreduce bucket
  // The device mesh (`--dp --tp --pp --ep`, mesh.h); dp 0: the ranks left over. Tensor
  // parallel (tp > 1, tensor_parallel.h) splits every layer over tp ranks; data parallel
  // splits the batch over dp.
  MeshShape mesh;
  // Pipeline parallel (pipeline.h; train.pp_microbatches, pp_schedule or --pp-microbatches,
  // --pp-schedule): the micro-batches and schedule of the mesh's pp stages. `stages` is set
  // from mesh.pp (the one place the stage count is given).
  PipelineConfig pipeline;
  // Mixture of experts (model.experts > 0): the weight of the router's load-balancing loss
  // (moe_train.h) in the objective; the logged training loss includes it, evaluations do not.
  float moe_aux_loss_coef = 0.01f;
  // Test seam (a slow disk): called on the checkpoint writer thread with the checkpoint's
  // step after its files are written, before it is committed.
  std::function<void(int64_t step)> before_checkpoint_commit;
};

// Sets the pipeline's schedule by name ("1f1b", "gpipe") and checks its stage and
// micro-batch counts: the one check of the recipe's train.pp* keys and the --pp* flags.
Status set_pipeline_config(std::string_view schedule, PipelineConfig* pipeline);

// Parses a recipe (sections model, data, train; see recipes/shakespeare_char.yaml). Unknown
// keys are errors, so that a typo does not silently train something else.
Result<TrainConfig> parse_train_config(const std::string& yaml_text, const std::string& file_name);

struct TrainResult {
  int64_t steps = 0;         // optimizer steps completed
  bool stopped = false;      // *stop ended the run early (after a checkpoint)
  float train_loss = 0.0f;   // final estimates (eval_iters batches each); 0 when stopped
  float val_loss = 0.0f;
  double seconds_per_step = 0.0;  // average over the steps of this process
  std::string checkpoint;    // the last checkpoint written (on rank 0)
};

// comm: the data-parallel ranks (nullptr: this process alone). Every rank calls it with the
// same config; *stop on any rank stops them all at the same step. registry: where rank 0
// exports the run's metrics (train_metrics.h; `koi train --metrics-port` serves it); nullptr:
// a registry of the run's own, still written to OUT/metrics.prom. trace: where this rank
// records its profile (`koi train --profile`): per step a "step" span (the interval
// koi_train_step_seconds measures) holding forward and backward per micro-batch (each with
// a span per layer and the head, from LlamaTrain), the
// collectives, gradient clipping and the optimizer; then checkpoint snapshots and
// evaluations on the step loop's track (0) and checkpoint writes on the writer's (1).
Result<TrainResult> run_training(const TrainConfig& config, bool resume, const std::atomic<bool>* stop,
                                 Communicator* comm = nullptr, metrics::Registry* registry = nullptr,
                                 trace::Recorder* trace = nullptr);

}  // namespace koi::train
