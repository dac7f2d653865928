// The Deployment's rollout as pure decisions over plain data, as plan() is for jobs
// (cluster/scheduler.h): the DeploymentController observes the replicas and the gateway,
// asks decide_rollout() what to do next, does it, and asks again in the next round. One
// call returns one action; nothing here does I/O or keeps state.
//
// A rollout from version A (N replicas) to B walks the canary steps (percent of traffic to
// B, the last one 100). Step i wants k = ceil(N * step / 100) replicas of B (at least 1; N at
// the last step), and never more than N + 1 replicas in all, draining ones included: the
// first replica of B is the one extra; after that each further B replica waits for an A
// replica to be retired. Once B has its k replicas ready, its weight is set to the step's
// percent and observed for stepSeconds; the step passes when the SLO held over at least
// minRequests requests of B; the last passed step completes the rollout (the caller
// retires A's remaining replicas). A's last replica stays until then, so a rollback always
// has somewhere to send the traffic.
// Rollback, at once: a replica of B failed or missed its ready timeout, or B's window broke
// the SLO (judge_slo).
//
// judge_slo(): B's responses in the step's window. Errors are the replicas' responses of
// status >= 400 other than 429 (under a rollout the same clients send the same requests to
// both versions, so a version that answers 4xx where the other answered 2xx is broken) and
// the gateway's failed attempts on B (5xx, refused or cut connections). The error rate is
// judged over minRequests requests, or sooner once the errors alone exceed
// maxErrorRate x minRequests; p99 TTFT over minRequests first tokens.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "cluster/control_plane/deployment.h"

namespace koi::cluster {

struct SloWindow {
  int64_t requests = 0;
  int64_t errors = 0;
  int64_t ttft_count = 0;   // first tokens measured
  double ttft_p99_ms = 0;   // over those
  double since = 0;         // when the window opened (unix seconds)
};

struct SloVerdict {
  bool breached = false;
  bool enough = false;  // the window holds minRequests requests
  std::string slo;      // "maxErrorRate" | "p99TtftMs" when breached
  std::string message;  // in words, with the measured value and the limit
};

SloVerdict judge_slo(const SloPolicy& slo, const SloWindow& window);

struct RolloutView {
  int desired = 1;               // N, the replicas the deployment wants
  std::vector<int> steps;        // the canary steps (percent)
  int step = 0;                  // index of the step being worked on
  int weight = 0;                // B's weight on the gateway now (percent)
  double weight_since = 0;       // when that weight was applied
  double step_seconds = 30;
  double now = 0;
  int new_replicas = 0;          // B's replicas, draining ones excluded
  int new_ready = 0;             // of those, ready and registered with the gateway
  std::string new_failure;       // "" or why a replica of B failed
  int old_replicas = 0;          // A's replicas, draining ones excluded
  int draining = 0;              // replicas of either version being retired
  SloVerdict slo;                // B's window at this step
};

enum class RolloutAction { kWait, kStartReplica, kRetireOld, kSetWeight, kNextStep, kComplete, kRollback };
std::string_view rollout_action_name(RolloutAction a);

struct RolloutDecision {
  RolloutAction action = RolloutAction::kWait;
  int weight = 0;        // kSetWeight: B's new weight
  std::string reason;    // kWait: what it waits for; kRollback: ReplicaFailed | SloBreached
  std::string message;
};

// B's replicas step `step` wants.
int replicas_for_step(int desired, const std::vector<int>& steps, int step);
RolloutDecision decide_rollout(const RolloutView& v);

}  // namespace koi::cluster
