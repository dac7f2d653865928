#include "train/train_metrics.h"

#include <vector>

namespace koi::train {

namespace {
constexpr const char* kCollectiveKinds[] = {"allreduce", "allgather", "reduce_scatter", "broadcast",
                                            "barrier",   "alltoall",  "send",           "recv"};
}  // namespace
namespace {

const std::vector<double> kStepBuckets = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                                          0.5,   1.0,    2.5,   5.0,  10.0,  30.0, 60.0};
const std::vector<double> kCheckpointBuckets = {0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0};

}  // namespace

TrainMetrics::TrainMetrics(metrics::Registry& r)
    : registry(r),
      step(r.gauge("koi_train_step", "Optimizer steps taken.").labels({})),
      loss(r.gauge("koi_train_loss", "Training loss of the last step.").labels({})),
      val_loss(r.gauge("koi_train_val_loss", "Validation loss of the last evaluation.").labels({})),
      lr(r.gauge("koi_train_learning_rate", "Learning rate of the last step.").labels({})),
      grad_norm(r.gauge("koi_train_grad_norm", "Gradient norm of the last step, before clipping.").labels({})),
      tokens_per_second(r.gauge("koi_train_tokens_per_second", "Training tokens per second in the last step.").labels({})),
      step_seconds(r.gauge("koi_train_step_seconds", "Wall time of the last step.").labels({})),
      step_duration(r.histogram("koi_train_step_duration_seconds", "Wall time of each optimizer step.", {}, kStepBuckets)
                        .labels({})),
      tokens(r.counter("koi_train_tokens_total", "Training tokens consumed (all ranks).").labels({})),
      model_flops_per_token(r.gauge("koi_train_model_flops_per_token",
                                    "Model FLOPs of one training token (3x the forward; see train/flops.h).")
                                .labels({})),
      peak_flops(r.gauge("koi_train_peak_flops_per_second",
                         "Measured peak FLOP/s of the trainer's fp32 matmul on its thread pool (all ranks).")
                     .labels({})),
      model_flops_per_second(
          r.gauge("koi_train_model_flops_per_second", "Model FLOPs of the last step over its wall time.").labels({})),
      mfu(r.gauge("koi_train_model_flops_utilization_ratio",
                  "Model FLOPs utilisation: koi_train_model_flops_per_second / koi_train_peak_flops_per_second.")
              .labels({})),
      checkpoint_snapshot(r.histogram("koi_train_checkpoint_snapshot_seconds",
                                      "Time the step loop paused to copy the state for a checkpoint.", {},
                                      kCheckpointBuckets)
                              .labels({})),
      checkpoint_write(r.histogram("koi_train_checkpoint_write_seconds",
                                   "Wall time of writing one checkpoint (in the background).", {}, kCheckpointBuckets)
                           .labels({})),
      pipeline_bubble(r.gauge("koi_train_pipeline_bubble_ratio",
                              "Pipeline parallel: share of the last step's schedule the stages spent waiting for a "
                              "neighbour (mean over stages).")
                          .labels({})),
      pipeline_bubble_theory(r.gauge("koi_train_pipeline_bubble_theory_ratio",
                                     "Pipeline parallel: the bubble of an ideal schedule, (p-1)/(m+p-1).")
                                 .labels({})),
      collective_seconds(r.counter("koi_train_collective_seconds_total",
                                   "Seconds spent inside collectives, by kind (allreduce, allgather, reduce_scatter, "
                                   "broadcast, barrier, alltoall, send, recv).",
                                   {"collective"})),
      collectives(r.counter("koi_train_collectives_total", "Collectives called, by kind.", {"collective"})),
      collective_bytes(r.counter("koi_train_collective_bytes_total",
                                 "Bytes of the collectives' full buffers (an allreduce's data, an allgather's "
                                 "gathered result, a reduce-scatter's input), by kind.",
                                 {"collective"})) {
  for (const char* kind : kCollectiveKinds) {
    collective_seconds.labels({kind});
    collectives.labels({kind});
    collective_bytes.labels({kind});
  }
}

double TrainMetrics::collective_bytes_total() {
  double sum = 0.0;
  for (const char* kind : kCollectiveKinds) sum += collective_bytes.labels({kind}).value();
  return sum;
}

}  // namespace koi::train
