#include "cluster/control_plane/rollout.h"

#include <fmt/format.h>

#include <algorithm>

namespace koi::cluster {

std::string_view rollout_action_name(RolloutAction a) {
  switch (a) {
    case RolloutAction::kWait: return "Wait";
    case RolloutAction::kStartReplica: return "StartReplica";
    case RolloutAction::kRetireOld: return "RetireOld";
    case RolloutAction::kSetWeight: return "SetWeight";
    case RolloutAction::kNextStep: return "NextStep";
    case RolloutAction::kComplete: return "Complete";
    case RolloutAction::kRollback: return "Rollback";
  }
  return "?";
}

SloVerdict judge_slo(const SloPolicy& slo, const SloWindow& w) {
  SloVerdict v;
  v.enough = w.requests >= slo.min_requests;
  const double rate = w.requests > 0 ? static_cast<double>(w.errors) / static_cast<double>(w.requests) : 0;
  const bool errors_alone = static_cast<double>(w.errors) > slo.max_error_rate * slo.min_requests;
  if ((v.enough || errors_alone) && w.requests > 0 && rate > slo.max_error_rate) {
    v.breached = true;
    v.slo = "maxErrorRate";
    v.message = fmt::format("error rate {:.3f} ({} of {} requests) is above maxErrorRate {}", rate, w.errors, w.requests,
                            slo.max_error_rate);
    return v;
  }
  if (slo.p99_ttft_ms > 0 && w.ttft_count >= slo.min_requests && w.ttft_p99_ms > slo.p99_ttft_ms) {
    v.breached = true;
    v.slo = "p99TtftMs";
    v.message = fmt::format("p99 time to first token {:.0f} ms (over {} requests) is above p99TtftMs {}", w.ttft_p99_ms,
                            w.ttft_count, slo.p99_ttft_ms);
  }
  return v;
}

int replicas_for_step(int desired, const std::vector<int>& steps, int step) {
  if (step + 1 >= static_cast<int>(steps.size())) return desired;
  const int k = (desired * steps[step] + 99) / 100;
  return std::clamp(k, 1, std::max(1, desired));
}

namespace {

RolloutDecision wait(std::string reason, std::string message) {
  return {RolloutAction::kWait, 0, std::move(reason), std::move(message)};
}

}  // namespace

RolloutDecision decide_rollout(const RolloutView& v) {
  if (!v.new_failure.empty()) return {RolloutAction::kRollback, 0, "ReplicaFailed", v.new_failure};
  if (v.weight > 0 && v.slo.breached) return {RolloutAction::kRollback, 0, "SloBreached", v.slo.message};
  const int pct = v.steps[v.step];
  const int k = replicas_for_step(v.desired, v.steps, v.step);
  if (v.new_replicas < k) {
    if (v.new_replicas + v.old_replicas + v.draining < v.desired + 1) return {RolloutAction::kStartReplica, 0, "", ""};
    if (v.old_replicas > 0 && v.draining == 0) return {RolloutAction::kRetireOld, 0, "", ""};
    return wait("Surge", "waiting for a retired replica to stop (at most one extra replica during a rollout)");
  }
  if (v.new_ready < k) return wait("WaitingForReplica", fmt::format("{} of {} new replicas ready", v.new_ready, k));
  if (v.weight != pct) return {RolloutAction::kSetWeight, pct, "", ""};
  if (v.now - v.weight_since < v.step_seconds) {
    return wait("Observing", fmt::format("step {} of {} ({}%): observing for {:g} s from {}", v.step + 1, v.steps.size(),
                                         pct, v.step_seconds, rfc3339(v.weight_since)));
  }
  if (!v.slo.enough) {
    return wait("AwaitingTraffic", fmt::format("step {} of {} ({}%): too few requests yet to judge the SLO", v.step + 1,
                                               v.steps.size(), pct));
  }
  if (v.step + 1 < static_cast<int>(v.steps.size())) return {RolloutAction::kNextStep, 0, "", ""};
  return {RolloutAction::kComplete, 0, "", ""};
}

}  // namespace koi::cluster
