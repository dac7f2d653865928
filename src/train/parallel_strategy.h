// ParallelStrategy: the one place a training step branches on how the model is spread over
// the ranks of the device mesh. Exactly one of opt (plain data parallel or ZeRO-1,
// data_parallel.h), zero (ZeRO-2/3, zero.h) and pipeline (a stage of the pp group,
// pipeline.h) is set; tp is set when the model is a tensor-parallel shard
// (tensor_parallel.h). `data` is the group that splits the batch (the dp group, or the ep group
// under expert parallelism). A plain struct of borrowed pointers: it owns nothing, and every
// pointee must outlive it. Not thread-safe; every method that communicates must be called on
// every rank in the same order. Failures are the collectives' (DeadlineExceeded and the like).
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "base/trace.h"
#include "train/collectives.h"
#include "train/data_parallel.h"
#include "train/grad_overlap.h"
#include "train/llama_train.h"
#include "train/optimizer.h"
#include "train/pipeline.h"
#include "train/tensor_parallel.h"
#include "train/zero.h"

namespace koi::train {

struct ParallelStrategy {
  LlamaTrain* model = nullptr;
  Communicator* data = nullptr;
  DistributedAdamW* opt = nullptr;
  ShardedDataParallel* zero = nullptr;
  Pipeline* pipeline = nullptr;
  const TensorParallel* tp = nullptr;
  GradientOverlap* overlap = nullptr;  // with opt: the last micro-batch's backward sums as it goes
  trace::Recorder* trace = nullptr;

  // Forward and backward of this rank's B sequences of T tokens (a pipeline: through the
  // schedule's micro-batches), grads += loss_scale * d(summed token losses). Returns this rank's
  // (loss + aux loss) * B (a pipeline stage: its part of it, the cross-entropy on the last).
  // last_micro_batch: the step's last, whose backward starts the gradient sums under overlap.
  Result<double> forward_backward(const int32_t* inputs, const int32_t* targets, int B, int T, float loss_scale,
                                  bool last_micro_batch);
  // Sums the gradients over `data` (ZeRO-2/3, and ZeRO-0/1 with overlap: waits for the
  // reductions in flight).
  Status reduce_grads(int64_t bucket_floats);
  // The global gradient norm (before clipping), clipped to max_norm.
  Result<float> clip_grad_norm(float max_norm);
  // AdamW on what this rank updates.
  Status step(float lr, ThreadPool* pool);
  // Gathers the whole optimizer state (and, for ZeRO-3 or a pipeline, the weights into the
  // model) and calls use on every rank.
  Status with_full_state(const std::function<Status(AdamW&)>& use);
  // A pipeline's bubble since the last call, every stage's (Pipeline::bubble); empty without one.
  Result<std::vector<double>> bubble();
};

}  // namespace koi::train
