// Pipeline parallelism for the trainer (trainer.cc), over a Communicator of the pipeline's
// ranks (collectives.h; stage = rank): the model's layers split into contiguous stages
// (stage_layers: the embedding on the first, the final norm, classifier and loss on the last),
// each batch split into micro-batches run through a PipelineSchedule (pipeline_schedule.h:
// 1F1B or GPipe), the residual stream (B*T, C) sent forward and its gradient sent backward
// between neighbouring stages with send/recv.
//
// Every rank keeps the model's whole flat parameter and gradient buffers (LlamaTrain) but
// computes, and its AdamW updates, only its stage's slice (params()): the layout is
// embedding, layers, norm, classifier, so each stage's tensors are one contiguous range.
// With tied embeddings the last stage's classifier is the first stage's embedding: its
// gradient goes to the first stage before clipping and the updated table comes back after
// the optimizer step. Gradients are accumulated over the micro-batches with the global
// token count as the scale, so a step equals the single-process step on the same batch (up
// to the order of floating-point sums).
//
// A checkpoint holds the whole model: with_full_state() gathers every stage's parameters
// and AdamW moments, so it loads at any stage count, or in one process, and
// load_full_state() takes a stage's part of one.
//
// The bubble: each stage times its schedule and what of it it waits for its neighbours
// (inside recv); bubble() reports every stage's idle share of the pipeline's span (the
// longest stage's schedule: a stage that finishes early idles too, as in (p-1)/(m+p-1)).
//
// Not thread-safe; every method that communicates must be called on every stage.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "train/collectives.h"
#include "train/data_parallel.h"
#include "train/llama_train.h"
#include "train/optimizer.h"
#include "train/pipeline_schedule.h"
#include "train/tensor_parallel.h"

namespace koi::train {

struct PipelineConfig {
  int stages = 1;         // --pp: the pipeline's ranks
  int micro_batches = 1;  // --pp-microbatches: each batch split into this many
  PipelineSchedule schedule = PipelineSchedule::k1F1B;  // --pp-schedule
};

// The layers of stage `stage`: n_layers split into `stages` contiguous ranges.
Range stage_layers(int n_layers, int stages, int stage);

class Pipeline {
 public:
  // comm (stages ranks; stage = rank) and model must outlive the pipeline. Fails with what
  // to change when the model has fewer layers than stages, batch_size does not split into
  // micro_batches, or the model trains LoRA adapters. Sets the model's layer range.
  static Result<Pipeline> create(Communicator* comm, LlamaTrain* model, const PipelineConfig& config,
                                 const AdamWConfig& adam, int batch_size);

  int stage() const { return stage_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == config_.stages - 1; }
  Range params() const { return params_; }  // this stage's slice of the flat parameters
  // Under tensor parallelism (tp must outlive the pipeline): the model is a tp shard, and the
  // gradient norm sums the stage's split tensors over the tp group (tensor_parallel.h).
  void set_tensor_parallel(const TensorParallel* tp) { tp_ = tp; }

  // One batch (B sequences of T tokens: every stage passes the same) through the schedule:
  // grads += loss_scale * the gradient of the summed token losses. Returns this stage's part
  // of sum over micro-batches of (loss + aux loss) * sequences: the cross-entropy on the last
  // stage, the router's load-balancing term of this stage's layers on each.
  Result<double> train_batch(const int32_t* inputs, const int32_t* targets, int B, int T, float loss_scale);
  // The forward pass of a batch in one piece; the batch's mean loss * B on the last stage, 0
  // on the others.
  Result<double> eval_batch(const int32_t* inputs, const int32_t* targets, int B, int T);

  // After a step's batches: the tied embedding's gradient to the first stage, then the global
  // gradient norm over every stage (returned, before clipping), clipped to max_norm.
  Result<float> clip_grad_norm(float max_norm);
  // AdamW on this stage's slice; the tied embedding back to the last stage.
  Status step(float lr, ThreadPool* pool);

  // Every stage's share of the pipeline's span since the last call that it did not compute
  // (1 - compute seconds / the longest stage's schedule seconds), gathered on every stage;
  // then starts counting anew.
  Result<std::vector<double>> bubble();

  // Gathers every stage's parameters into the model and the whole AdamW state, then calls
  // use(state) (every stage does; one writes it).
  Status with_full_state(const std::function<Status(AdamW&)>& use);
  // Takes this stage's part of a whole optimizer state (a checkpoint's).
  void load_full_state(AdamW& full);

 private:
  Pipeline(Communicator* comm, LlamaTrain* model, PipelineConfig config, const AdamWConfig& adam,
           std::vector<Range> stage_params);
  Status forward_micro(const int32_t* inputs, const int32_t* targets, int micro, int mb, int T, double* loss);
  Status backward_micro(int micro, int mb, int T, float loss_scale);
  Status recv_timed(float* data, int64_t n, int src, const std::string& what);
  // The tied embedding table's floats (0 when untied or one stage).
  int64_t tied_floats() const;

  Communicator* comm_;
  const TensorParallel* tp_ = nullptr;
  LlamaTrain* model_;
  PipelineConfig config_;
  AdamWConfig adam_;
  int stage_;
  Range params_;
  std::vector<int64_t> stage_sizes_;  // every stage's parameter count (the gathers' counts)
  std::vector<ParamTensor> layout_;   // the model's layout clipped to params_
  AdamW opt_;                         // m and v of params_
  std::vector<float> slice_params_, slice_grads_;
  // Activations of micro-batches between forward and backward, and spare sets to reuse.
  std::vector<LlamaTrain::SavedActivations> held_, spare_;
  std::vector<float> message_;        // a received residual or gradient
  double idle_s_ = 0.0, schedule_s_ = 0.0;
};

}  // namespace koi::train
