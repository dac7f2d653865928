// Versions and rollouts.
//
// pick_weighted(): the weighted traffic split between the versions of a model; a seeded Rng
// makes a split reproducible. Returns weights.size() when every weight is zero.
//
// RolloutController: the state machine behind `koi gateway rollout`. It moves the new
// version's share of traffic through `steps` (percentages, the last one normally 100); after
// each observation window it compares the new version's window with the old one's and says
// what to do next:
//   hold      the new version served fewer than `min_requests` in the window: observe longer;
//   rollback  its error rate exceeded `max_error_rate` (judged before `min_requests` once the
//             errors alone exceed max_error_rate x min_requests), or its mean latency exceeded
//             `max_latency_ratio` x the old version's: set its weight to 0 (terminal);
//   advance   to the next step's weight;  done  the last step passed (terminal).
// Pure and deterministic; not thread-safe.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/random.h"
#include "base/status.h"

namespace koi::gateway {

size_t pick_weighted(std::span<const double> weights, Rng& rng);

struct RolloutPlan {
  std::vector<double> steps;      // percent of traffic to the new version, increasing
  double max_error_rate = 0.05;   // errors / requests of the new version in one window
  double max_latency_ratio = 3.0; // new mean latency / old mean latency
  int64_t min_requests = 20;      // per window, before a judgement is made
};
Status validate(const RolloutPlan& plan);

struct VersionWindow {
  int64_t requests = 0;
  int64_t errors = 0;
  double latency_sum_s = 0;
  double mean_latency_s() const { return requests ? latency_sum_s / static_cast<double>(requests) : 0; }
  double error_rate() const { return requests ? static_cast<double>(errors) / static_cast<double>(requests) : 0; }
};

enum class RolloutAction { kHold, kAdvance, kRollback, kDone };

class RolloutController {
 public:
  explicit RolloutController(RolloutPlan plan) : plan_(std::move(plan)) {}

  // The new version's weight to apply now (percent).
  double weight() const { return rolled_back_ ? 0.0 : plan_.steps[step_]; }
  RolloutAction observe(const VersionWindow& canary, const VersionWindow& baseline);
  bool finished() const { return rolled_back_ || done_; }
  // Why the last rollback happened ("" if none).
  const std::string& reason() const { return reason_; }

 private:
  RolloutPlan plan_;
  size_t step_ = 0;
  bool rolled_back_ = false;
  bool done_ = false;
  std::string reason_;
};

}  // namespace koi::gateway
