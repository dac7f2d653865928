// TrainMetrics: the metrics a training run exports, as references into a metrics::Registry
// (base/metrics.h): `koi train --metrics-port N` serves that registry at /metrics, and the
// trainer rewrites it into OUT/metrics.prom at each logged step and evaluation. Rank 0 sets
// them. Names follow Prometheus conventions (base units in the name, _total counters):
//   koi_train_step, koi_train_loss, koi_train_val_loss, koi_train_learning_rate,
//   koi_train_grad_norm, koi_train_tokens_per_second, koi_train_step_seconds   (last step)
//   koi_train_step_duration_seconds          histogram of step wall times
//   koi_train_tokens_total                   training tokens consumed
//   koi_train_model_flops_per_token          training FLOPs per token (flops.h)
//   koi_train_peak_flops_per_second          the measured matmul peak MFU divides by
//   koi_train_model_flops_per_second         model FLOPs of the last step / its wall time
//   koi_train_model_flops_utilization_ratio  the two above divided (0..1)
//   koi_train_checkpoint_snapshot_seconds    histogram: the step loop's pause to copy the state
//   koi_train_checkpoint_write_seconds       histogram: the background write of a checkpoint
//   koi_train_collective_seconds_total{collective}  rank 0's time inside each kind of collective
//   koi_train_collectives_total{collective}         collectives called
//   koi_train_collective_bytes_total{collective}    bytes of the collectives' full buffers
// (collective: allreduce, allgather, reduce_scatter, broadcast, barrier, alltoall, send, recv;
// see TimedCommunicator.)
//   koi_train_pipeline_bubble_ratio          pipeline parallel: the share of the last step's
//                                            schedule the stages spent waiting (mean over stages)
//   koi_train_pipeline_bubble_theory_ratio   (p-1)/(m+p-1) for p stages and m micro-batches
#pragma once

#include "base/metrics.h"

namespace koi::train {

struct TrainMetrics {
  explicit TrainMetrics(metrics::Registry& registry);

  metrics::Registry& registry;
  metrics::Gauge& step;
  metrics::Gauge& loss;
  metrics::Gauge& val_loss;
  metrics::Gauge& lr;
  metrics::Gauge& grad_norm;
  metrics::Gauge& tokens_per_second;
  metrics::Gauge& step_seconds;
  metrics::Histogram& step_duration;
  metrics::Counter& tokens;
  metrics::Gauge& model_flops_per_token;
  metrics::Gauge& peak_flops;
  metrics::Gauge& model_flops_per_second;
  metrics::Gauge& mfu;
  metrics::Histogram& checkpoint_snapshot;
  metrics::Histogram& checkpoint_write;
  metrics::Gauge& pipeline_bubble;
  metrics::Gauge& pipeline_bubble_theory;
  metrics::Family<metrics::Counter> collective_seconds;
  metrics::Family<metrics::Counter> collectives;
  metrics::Family<metrics::Counter> collective_bytes;

  // The sum of collective_bytes over the kinds: every byte this process's communicators (the
  // world and the mesh's axes) handed to collectives so far.
  double collective_bytes_total();
};

}  // namespace koi::train
