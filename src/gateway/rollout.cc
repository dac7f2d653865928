#include "gateway/rollout.h"

#include <fmt/format.h>

namespace koi::gateway {

size_t pick_weighted(std::span<const double> weights, Rng& rng) {
  double total = 0;
  for (double w : weights) total += w;
  if (total <= 0) return weights.size();
  double x = rng.uniform() * total;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (x < weights[i]) return i;
    x -= weights[i];
  }
  for (size_t i = weights.size(); i-- > 0;) {  // rounding: the last version with weight
    if (weights[i] > 0) return i;
  }
  return weights.size();
}

Status validate(const RolloutPlan& plan) {
  if (plan.steps.empty()) return Status::invalid_argument("--steps needs at least one percentage, e.g. 10,50,100");
  double prev = 0;
  for (double s : plan.steps) {
    if (s <= prev || s > 100) {
      return Status::invalid_argument(fmt::format("--steps must increase within (0, 100]; got {} after {}", s, prev));
    }
    prev = s;
  }
  return ok_status();
}

RolloutAction RolloutController::observe(const VersionWindow& canary, const VersionWindow& baseline) {
  if (finished()) return rolled_back_ ? RolloutAction::kRollback : RolloutAction::kDone;
  // Errors are judged early once they exceed what a whole window could tolerate.
  const bool judged = canary.requests >= plan_.min_requests ||
                      static_cast<double>(canary.errors) > plan_.max_error_rate * static_cast<double>(plan_.min_requests);
  if (judged && canary.error_rate() > plan_.max_error_rate) {
    rolled_back_ = true;
    reason_ = fmt::format("error rate {:.3f} > {:.3f} ({} of {} requests)", canary.error_rate(),
                          plan_.max_error_rate, canary.errors, canary.requests);
    return RolloutAction::kRollback;
  }
  if (canary.requests < plan_.min_requests) return RolloutAction::kHold;
  if (baseline.requests > 0 && canary.mean_latency_s() > plan_.max_latency_ratio * baseline.mean_latency_s()) {
    rolled_back_ = true;
    reason_ = fmt::format("mean latency {:.3f}s > {} x {:.3f}s of the old version", canary.mean_latency_s(),
                          plan_.max_latency_ratio, baseline.mean_latency_s());
    return RolloutAction::kRollback;
  }
  if (step_ + 1 == plan_.steps.size()) {
    done_ = true;
    return RolloutAction::kDone;
  }
  ++step_;
  return RolloutAction::kAdvance;
}

}  // namespace koi::gateway
