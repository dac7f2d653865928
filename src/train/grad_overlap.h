// GradientOverlap: ZeRO-0/1's gradient allreduce overlapped with the backward pass (the
// trainer's default; `--no-overlap` sums the gradients after backward in buckets instead,
// allreduce_grads in data_parallel.h). Attached to a LlamaTrain as its UnitStream for the last
// micro-batch's backward only: the weights stay in params(), each unit's gradient is
// accumulated in place in the model's grads() (a layer is one contiguous run of it; the root's
// runs go through a buffer of its own, copied in before and back after its backward), and when
// a unit's backward is done its runs are allreduced over `data` with non-blocking collectives
// (Communicator::start_allreduce_sum) while the next layer's backward computes. finish() waits
// for them all; then grads() holds the sum over the ranks, as allreduce_grads leaves it (the
// same sums, bitwise on 2 ranks). Not with LoRA (its gradients are the adapters') or a
// pipeline stage. Owns its root buffer; data and model must outlive it. Not thread-safe; every
// rank of `data` makes the same calls. finish() returns the first failed collective and waits
// for none after it (the process must then abort, collectives.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "train/collectives.h"
#include "train/llama_train.h"

namespace koi::train {

class GradientOverlap final : public UnitStream {
 public:
  GradientOverlap(Communicator* data, LlamaTrain* model) : data_(data), model_(model) {}

  // Runs model->backward(loss_scale) with the per-unit allreduces started as it goes.
  void backward(float loss_scale);
  // Waits for every started allreduce (in start order); the first failure, else ok. Without a
  // backward() since the last finish(): nothing to wait for.
  Status finish();
  // Whether allreduces are in flight (a backward() ran since the last finish()).
  bool started() const { return !tickets_.empty(); }

  // UnitStream.
  const float* forward_params(int) override { return nullptr; }
  void forward_done(int) override {}
  const float* backward_params(int) override { return nullptr; }
  float* backward_grads(int unit) override;
  void backward_done(int unit) override;

 private:
  Communicator* data_;
  LlamaTrain* model_;
  std::vector<float> root_;        // the root's runs of grads(), one after the other
  std::vector<int64_t> tickets_;   // started allreduces, in order
};

}  // namespace koi::train
