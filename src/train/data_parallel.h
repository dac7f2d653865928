// Data parallelism for the trainer (trainer.cc), over a Communicator (collectives.h).
//
// With N ranks each rank computes batch_size / N sequences of the global batch, backward
// scales by the global token count, and allreduce_grads() sums the gradients in buckets,
// so every rank ends with the gradient of the single-process mean loss (up to the order of
// the floating-point sums). DistributedAdamW then applies AdamW either on every rank to the
// whole parameter vector (zero_stage 0) or, for ZeRO stage 1, keeps m and v only for this
// rank's contiguous shard of the flat vector, updates that shard and allgathers the
// parameters. AdamW is elementwise, so both give bitwise the same parameters. A checkpoint
// always holds the full optimizer state (with_full_state gathers it), so it loads on any
// number of ranks. StragglerDetector flags a rank whose step time stays above 1.5x the
// median. Not thread-safe; every method that communicates must be called on every rank.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/collectives.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {

// [begin, end) of `n` items split into `parts` contiguous ranges; the first n % parts ranges
// get one item more.
Range split_range(int64_t n, int parts, int part);

// The tensors of layout that overlap r, cut to r, with offsets counted from r.begin.
std::vector<ParamTensor> clip_layout(const std::vector<ParamTensor>& layout, Range r);

// Sums grads over the ranks, bucket_floats at a time ("allreduce grads bucket K").
Status allreduce_grads(Communicator& comm, std::vector<float>& grads, int64_t bucket_floats);

class DistributedAdamW {
 public:
  // zero_stage 0 or 1; layout covers the whole parameter vector.
  DistributedAdamW(Communicator* comm, AdamWConfig config, const std::vector<ParamTensor>& layout, int zero_stage);

  // One AdamW update of params with the (already summed) grads; identical on every rank (and
  // for any pool, which runs the update when given).
  Status step(std::vector<float>& params, const std::vector<float>& grads, float lr, ThreadPool* pool = nullptr);
  // Calls use(state) with the whole optimizer state: this rank's own under stage 0, a
  // gathered copy under stage 1 (every rank gathers; use it on one rank to write it).
  Status with_full_state(const std::function<Status(AdamW&)>& use);
  // Takes this rank's part of a whole optimizer state (a checkpoint's).
  void load_full_state(AdamW& full);

 private:
  Communicator* comm_;
  AdamWConfig config_;
  int zero_stage_;
  int64_t num_params_;
  std::vector<ParamTensor> layout_;  // stage 0: the model's; stage 1: clipped to shard_, offsets from its start
  Range shard_;                      // stage 0: everything
  std::vector<int64_t> shard_sizes_;  // every rank's shard size (the allgather's counts)
  AdamW opt_;                         // m and v of shard_
  std::vector<float> shard_params_, shard_grads_;  // stage 1: this rank's slices
};

// Flags a rank whose step time exceeds ratio x the median over the ranks for `consecutive`
// steps in a row.
class StragglerDetector {
 public:
  explicit StragglerDetector(int ranks, double ratio = 1.5, int consecutive = 5);
  // Takes one step's time per rank; returns the ranks whose streak has just reached
  // `consecutive` (each streak is reported once).
  std::vector<int> observe(const std::vector<double>& step_ms);
  static double median(std::vector<double> values);
  double ratio() const { return ratio_; }
  int consecutive() const { return consecutive_; }

 private:
  double ratio_;
  int consecutive_;
  std::vector<int> streak_;
};

}  // namespace koi::train
