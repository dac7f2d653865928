#include "train/pipeline_schedule.h"

#include <algorithm>

#include "base/check.h"

namespace koi::train {

Result<PipelineSchedule> pipeline_schedule_from_name(std::string_view name) {
  if (name == "1f1b") return PipelineSchedule::k1F1B;
  if (name == "gpipe") return PipelineSchedule::kGPipe;
  return Status::invalid_argument("unknown pipeline schedule '" + std::string(name) + "' (known: 1f1b, gpipe)");
}

const char* pipeline_schedule_name(PipelineSchedule schedule) {
  return schedule == PipelineSchedule::k1F1B ? "1f1b" : "gpipe";
}

std::vector<PipelineOp> stage_schedule(PipelineSchedule schedule, int stages, int stage, int micro_batches) {
  KOI_CHECK(stages >= 1 && 0 <= stage && stage < stages && micro_batches >= 1);
  using Kind = PipelineOp::Kind;
  std::vector<PipelineOp> ops;
  const int warmup = schedule == PipelineSchedule::kGPipe ? micro_batches : std::min(stages - stage - 1, micro_batches);
  int next_forward = 0, next_backward = 0;
  for (; next_forward < warmup; ++next_forward) ops.push_back({Kind::kForward, next_forward});
  // Steady state: one forward, one backward.
  for (; next_forward < micro_batches; ++next_forward, ++next_backward) {
    ops.push_back({Kind::kForward, next_forward});
    ops.push_back({Kind::kBackward, next_backward});
  }
  for (; next_backward < micro_batches; ++next_backward) ops.push_back({Kind::kBackward, next_backward});
  return ops;
}

double theoretical_bubble(int stages, int micro_batches) {
  return static_cast<double>(stages - 1) / static_cast<double>(micro_batches + stages - 1);
}

}  // namespace koi::train
