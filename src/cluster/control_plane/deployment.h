// Deployment: a model served by `koi serve` replicas behind a `koi gateway` route, as the
// store keeps it (StoredObject kind "Deployment", in the tenant's namespace):
//
//   apiVersion: koi/v1
//   kind: Deployment
//   metadata: {name: fortunes, namespace: alpha}
//   spec:
//     model: fortunes@production       # parse_model_ref: an alias, a version or the latest
//     route: fortunes                  # the gateway's model name (default metadata.name)
//     replicas: {min: 1, max: 3}
//     resources: {cpu: 1, memoryMiB: 1024}     # per replica, as a Job's
//     queue: serving                   # default: the namespace's first queue
//     priority: 100
//     serveArgs: [--max-num-seqs, "4"] # extra koi serve flags (not --model, --port, --host, --lora)
//     adapters: {poet: /abs/poet}      # LoRA adapters (PEFT directories) every replica serves
//                                      # by name beside the route's base model (--lora NAME=DIR)
//     rollout: {canarySteps: [10, 50, 100], stepSeconds: 30, readyTimeoutSeconds: 120,
//               drainTimeoutSeconds: 30}
//     slo: {maxErrorRate: 0.05, p99TtftMs: 500, minRequests: 20}
//     autoscale: {metric: waitingRequests|kvCacheUsage|ttftMs, target: 2,
//                 scaleDownDelaySeconds: 60}          # absent: fixed at replicas.min
//
// status (written by the DeploymentController only): phase (Progressing, Available,
// RollingBack, Degraded, Failed), reason, message, the live version and the one before it,
// the rollout in progress, the last rollback (which SLO broke, since when), the replicas
// with their version, readiness and weight, the autoscaler's state, conditions. Events
// (kind Deployment) record every step with its cause.
//
// parse_deployment_manifest() is the one reader of user input: unknown keys and bad values
// are InvalidArgument naming the path ("spec.rollout.canarySteps[1]: ...").
#pragma once

#include <boost/json/object.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/model_registry.h"
#include "cluster/control_plane/object.h"
#include "cluster/control_plane/state_store.h"
#include "cluster/types.h"

namespace koi::cluster {

inline constexpr const char* kDeploymentKind = "Deployment";

struct RolloutPolicy {
  std::vector<int> canary_steps = {10, 50, 100};  // percent of traffic; increasing, the last 100
  double step_seconds = 30;            // each step is observed at least this long
  double ready_timeout_seconds = 120;  // a new replica not ready by then fails the rollout
  double drain_timeout_seconds = 30;   // in-flight requests of a retired replica get this long
};

struct SloPolicy {
  double max_error_rate = 0.05;  // of the new version's responses in a step (see rollout.h)
  double p99_ttft_ms = 0;        // 0 = not judged
  int min_requests = 20;         // per step, before it may pass
};

enum class AutoscaleMetric { kWaitingRequests, kKvCacheUsage, kTtftMs };
std::string_view autoscale_metric_name(AutoscaleMetric m);

struct AutoscalePolicy {
  bool enabled = false;
  AutoscaleMetric metric = AutoscaleMetric::kWaitingRequests;
  double target = 1;                  // per replica (waiting requests, KV usage 0-1, p99 TTFT ms)
  double scale_down_delay_seconds = 60;
};

struct DeploymentSpec;
// The koi serve flags of a replica beyond the controller's own: spec.serveArgs, then
// --lora NAME=DIR for each of spec.adapters.
std::vector<std::string> replica_serve_args(const DeploymentSpec& spec);

struct DeploymentSpec {
  std::string model;  // as written: "fortunes@production"
  ModelRef ref;
  std::string route;
  int min_replicas = 1, max_replicas = 1;
  JobResources resources;
  std::string queue;
  int priority = 0;
  std::vector<std::string> serve_args;
  std::map<std::string, std::string> adapters;  // LoRA adapter name -> absolute PEFT directory
  RolloutPolicy rollout;
  SloPolicy slo;
  AutoscalePolicy autoscale;
};

struct DeploymentObject {
  ObjectMeta metadata;
  DeploymentSpec spec;
  boost::json::object spec_json;  // the spec as given, normalised (what GET shows)
};

// Parses and validates a Deployment manifest (YAML or JSON) for namespace `ns`.
Result<DeploymentObject> parse_deployment_manifest(const std::string& text, const std::string& ns);
// A stored spec back to its typed form (the controller's read; the same checks).
Result<DeploymentSpec> deployment_spec_from_json(const boost::json::object& spec);
boost::json::object deployment_spec_json(const DeploymentSpec& s);

// Creates the deployment or replaces its spec (and labels), keeping its status; an event
// says who did it. NotFound/InvalidArgument as the manifest or the model reference demand.
// `created` (optional) says which it was. Callers: the API, a pipeline's deploy step.
Status apply_deployment(StateStore& store, const Cluster& cluster, const std::string& ns,
                        const std::string& manifest_text, const std::string& by, bool* created = nullptr);

}  // namespace koi::cluster
