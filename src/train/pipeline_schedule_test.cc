// The pipeline schedules, run through an event simulation of p stages with blocking
// receives: every micro-batch's forward and backward once per stage, no deadlock, the
// activations held at once, and the idle share against (p-1)/(m+p-1).
#include "train/pipeline_schedule.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>

namespace koi::train {
namespace {

using Kind = PipelineOp::Kind;

struct Simulation {
  bool deadlock = false;
  double makespan = 0.0;
  std::vector<double> busy;     // per stage
  std::vector<int> max_held;    // per stage: micro-batches forwarded but not yet backwarded
};

// Runs every stage's ops in order; a forward waits for the previous stage's forward of the
// same micro-batch, a backward for the next stage's backward of it. Costs: forward 1, backward 2.
Simulation simulate(PipelineSchedule schedule, int p, int m) {
  std::vector<std::vector<PipelineOp>> ops(p);
  for (int s = 0; s < p; ++s) ops[s] = stage_schedule(schedule, p, s, m);
  std::map<std::tuple<int, Kind, int>, double> finished;  // (stage, kind, micro) -> time
  std::vector<size_t> next(p, 0);
  std::vector<double> free_at(p, 0.0);
  Simulation sim;
  sim.busy.assign(p, 0.0);
  sim.max_held.assign(p, 0);
  std::vector<int> held(p, 0);
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      while (next[s] < ops[s].size()) {
        const PipelineOp op = ops[s][next[s]];
        double ready = 0.0;
        if (op.kind == Kind::kForward && s > 0) {
          auto it = finished.find({s - 1, Kind::kForward, op.micro_batch});
          if (it == finished.end()) break;
          ready = it->second;
        }
        if (op.kind == Kind::kBackward) {
          auto it = s + 1 < p ? finished.find({s + 1, Kind::kBackward, op.micro_batch})
                              : finished.find({s, Kind::kForward, op.micro_batch});
          if (it == finished.end()) break;
          ready = it->second;
        }
        const double cost = op.kind == Kind::kForward ? 1.0 : 2.0;
        const double start = std::max(ready, free_at[s]);
        free_at[s] = start + cost;
        sim.busy[s] += cost;
        finished[{s, op.kind, op.micro_batch}] = free_at[s];
        held[s] += op.kind == Kind::kForward ? 1 : -1;
        sim.max_held[s] = std::max(sim.max_held[s], held[s]);
        ++next[s];
        progress = true;
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (next[s] != ops[s].size()) sim.deadlock = true;
    sim.makespan = std::max(sim.makespan, free_at[s]);
  }
  return sim;
}

TEST(PipelineSchedule, NamesParseAndUnknownIsAnError) {
  EXPECT_EQ(*pipeline_schedule_from_name("1f1b"), PipelineSchedule::k1F1B);
  EXPECT_EQ(*pipeline_schedule_from_name("gpipe"), PipelineSchedule::kGPipe);
  const auto bad = pipeline_schedule_from_name("zigzag");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "unknown pipeline schedule 'zigzag' (known: 1f1b, gpipe)");
}

TEST(PipelineSchedule, OneFOneBOrderOnTwoStages) {
  using O = PipelineOp;
  const std::vector<O> first = {{Kind::kForward, 0}, {Kind::kForward, 1}, {Kind::kBackward, 0}, {Kind::kForward, 2},
                                {Kind::kBackward, 1}, {Kind::kForward, 3}, {Kind::kBackward, 2}, {Kind::kBackward, 3}};
  EXPECT_EQ(stage_schedule(PipelineSchedule::k1F1B, 2, 0, 4), first);
  const std::vector<O> last = {{Kind::kForward, 0}, {Kind::kBackward, 0}, {Kind::kForward, 1}, {Kind::kBackward, 1},
                               {Kind::kForward, 2}, {Kind::kBackward, 2}, {Kind::kForward, 3}, {Kind::kBackward, 3}};
  EXPECT_EQ(stage_schedule(PipelineSchedule::k1F1B, 2, 1, 4), last);
  const std::vector<O> gpipe = {{Kind::kForward, 0}, {Kind::kForward, 1}, {Kind::kBackward, 0}, {Kind::kBackward, 1}};
  EXPECT_EQ(stage_schedule(PipelineSchedule::kGPipe, 2, 1, 2), gpipe);
}

TEST(PipelineSchedule, EveryScheduleCompletesWithTheTheoreticalBubble) {
  for (PipelineSchedule schedule : {PipelineSchedule::k1F1B, PipelineSchedule::kGPipe}) {
    for (int p : {1, 2, 3, 4}) {
      for (int m : {1, 2, 4, 8}) {
        SCOPED_TRACE(std::string(pipeline_schedule_name(schedule)) + " p=" + std::to_string(p) +
                     " m=" + std::to_string(m));
        for (int s = 0; s < p; ++s) {
          const std::vector<PipelineOp> ops = stage_schedule(schedule, p, s, m);
          ASSERT_EQ(ops.size(), static_cast<size_t>(2 * m));
          for (int i = 0; i < m; ++i) {  // each micro-batch forward once, then backward once
            auto f = std::find(ops.begin(), ops.end(), PipelineOp{Kind::kForward, i});
            auto b = std::find(ops.begin(), ops.end(), PipelineOp{Kind::kBackward, i});
            ASSERT_TRUE(f != ops.end() && b != ops.end() && f < b);
          }
        }
        const Simulation sim = simulate(schedule, p, m);
        ASSERT_FALSE(sim.deadlock);
        for (int s = 0; s < p; ++s) {
          EXPECT_NEAR(1.0 - sim.busy[s] / sim.makespan, theoretical_bubble(p, m), 1e-12);
          // 1F1B holds at most p - s micro-batches' activations; GPipe all of them.
          EXPECT_EQ(sim.max_held[s], schedule == PipelineSchedule::kGPipe ? m : std::min(m, p - s));
        }
      }
    }
  }
}

}  // namespace
}  // namespace koi::train
