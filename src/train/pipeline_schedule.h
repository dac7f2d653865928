// Pipeline schedules: the order in which one stage of a pipeline runs the forward and
// backward passes of a batch's micro-batches (pipeline.h executes it). Pure functions over
// plain values; thread-safe.
//
//   GPipe  every forward, then every backward: m micro-batches' activations held at once.
//   1F1B   (PipeDream-Flush, Megatron-LM's default) p - s - 1 warm-up forwards on stage s,
//          then one forward and one backward in turn, then the remaining backwards: at most
//          p - s micro-batches' activations held at once.
// Both run the backwards in micro-batch order 0, 1, ..., m-1, so they accumulate the same
// gradients in the same order. With p stages of equal cost and m micro-batches, each stage
// idles (p-1)/(m+p-1) of the schedule's time in either (the pipeline bubble).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::train {

enum class PipelineSchedule { k1F1B, kGPipe };

// "1f1b" or "gpipe"; anything else is an error naming both.
Result<PipelineSchedule> pipeline_schedule_from_name(std::string_view name);
const char* pipeline_schedule_name(PipelineSchedule schedule);

struct PipelineOp {
  enum class Kind { kForward, kBackward };
  Kind kind;
  int micro_batch;
  bool operator==(const PipelineOp&) const = default;
};

// The ops of stage `stage` (0 .. stages-1) for micro_batches micro-batches, in order.
std::vector<PipelineOp> stage_schedule(PipelineSchedule schedule, int stages, int stage, int micro_batches);

// (p-1)/(m+p-1): the share of the schedule each stage idles when stages cost the same.
double theoretical_bubble(int stages, int micro_batches);

}  // namespace koi::train
