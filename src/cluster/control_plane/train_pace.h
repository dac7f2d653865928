// The pace of a training job, judged by the control plane from the trainer's metrics.jsonl
// (one JSON object per logged step: "step", "step_ms" and, with several ranks, "rank_ms", each
// rank's compute time in that step). Two diagnoses come from it (docs/cluster.md#diagnoses):
//   Straggler     one rank's step time above kStragglerRatio x the median of all ranks in each
//                 of the last kPaceWindow steps: names the rank and its slowdown
//   SlowProgress  the median step_ms of the last kPaceWindow steps above kSlowRatio x the
//                 median of the job's earlier steps (at least kPaceHistory of them), and at
//                 least kSlowMinExtraMs more: step time against its own history (a few ms of
//                 scheduling noise on millisecond steps, a resumed run's first steps, are not
//                 a slowdown)
// A Straggler diagnosis clears when the ranks are even again (ranks_even); SlowProgress when
// the window's median is back within kRecoveredRatio x (or kSlowMinExtraMs / 2 above) the usual
// step time found at the diagnosis (recovered_pace: the history since then holds the slow
// steps, so it is no fair reference).
// Pure functions over text, and PaceFollower, which the reconciler keeps per running job to
// read only what the trainer appended since the last round (at first the last kPaceTailBytes).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace koi::cluster {

constexpr double kStragglerRatio = 1.5;
constexpr double kSlowRatio = 3.0;
constexpr double kSlowMinExtraMs = 50.0;
constexpr double kRecoveredRatio = 1.5;
constexpr int kPaceWindow = 5;
constexpr int kPaceHistory = 10;
constexpr int64_t kPaceTailBytes = 16 * 1024;  // ~120 steps of a 2-rank run
constexpr size_t kPaceKeepSteps = 128;         // the steps a PaceFollower keeps

struct StepPace {
  int64_t step = 0;
  double step_ms = 0;
  std::vector<double> rank_ms;  // empty for one rank
};

// The step records of `jsonl`, in order; lines that are not step records (evaluations, a
// partial first or last line of a tail) are skipped.
std::vector<StepPace> parse_pace(const std::string& jsonl);

struct Straggler {
  int rank = 0;
  double rank_ms = 0, median_ms = 0;  // the rank's and the ranks' median over the window
  int64_t first_step = 0, last_step = 0;
  std::string message() const;
};
std::optional<Straggler> find_straggler(const std::vector<StepPace>& steps);
// Whether every rank stayed within kStragglerRatio x the ranks' median in each of the last
// kPaceWindow steps: a Straggler diagnosis clears (the reverse of find_straggler's "in each",
// so a rank near the ratio does not flap between the two).
bool ranks_even(const std::vector<StepPace>& steps);

struct Slowdown {
  double recent_ms = 0, usual_ms = 0;  // medians of the window and of the steps before it
  int64_t first_step = 0, last_step = 0;
  int history = 0;  // steps the usual time is the median of
  std::string message() const;
};
std::optional<Slowdown> find_slowdown(const std::vector<StepPace>& steps);
// The median step_ms of the last kPaceWindow steps when it is back to `usual_ms` (the
// Slowdown's, at the diagnosis): at most kRecoveredRatio x it, or kSlowMinExtraMs / 2 above it;
// nullopt while it is not.
std::optional<double> recovered_pace(const std::vector<StepPace>& steps, double usual_ms);

double median(std::vector<double> values);

// Follows one metrics.jsonl as the trainer appends to it: each update() reads only the bytes
// written since the last (the first, at most the last kPaceTailBytes), holds back a partial last
// line until it is complete, and keeps the last kPaceKeepSteps step records. A file that shrank
// or is gone (a new run) starts over. Not thread-safe (the reconciler's thread).
class PaceFollower {
 public:
  // Reads what was appended to `path`; returns the kept steps, oldest first.
  const std::vector<StepPace>& update(const std::string& path);
  int64_t offset() const { return offset_; }  // bytes of the file consumed (for the tests)

 private:
  int64_t offset_ = 0;
  std::string partial_;  // a line without its newline yet
  std::vector<StepPace> steps_;
};

}  // namespace koi::cluster
