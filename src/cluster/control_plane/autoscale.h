// The Deployment's autoscaler as one pure decision over plain data (the controller measures,
// decide_scale() decides, the controller acts), in the manner of Kubernetes' HPA:
//   wanted = ceil(ready * metric / target), clamped to [min, max],
// where `metric` is the replicas' own measure from koi serve's /metrics, averaged over the
// ready replicas and a few seconds: waiting requests (koi:num_requests_waiting), KV-cache use
// (koi:kv_cache_usage_perc, 0-1) or p99 time to first token in ms.
// Up at once; down only after `wanted` stayed below the current count for
// scaleDownDelaySeconds, and then to the largest `wanted` seen over that delay (a dip does
// not shed capacity that a peak inside the delay needed). While a scale-up is still starting
// replicas (ready < desired) nothing but a further rise changes the count.
#pragma once

#include <optional>
#include <string>

#include "cluster/control_plane/deployment.h"

namespace koi::cluster {

struct ScaleView {
  AutoscalePolicy policy;
  int min_replicas = 1, max_replicas = 1;
  int desired = 1;                // the count in force
  int ready = 0;                  // replicas measured
  std::optional<double> metric;   // none when no ready replica reported
  double now = 0;
  double down_since = 0;          // 0: the count is not waiting to go down
  int down_max = 0;               // the largest `wanted` since down_since
};

struct ScaleDecision {
  int desired = 1;
  double down_since = 0;
  int down_max = 0;
  std::string reason;   // Fixed, ScaledUp, ScaledDown, ScaleDownPending, Steady, ScaleUpInProgress, NoMetrics
  std::string message;
};

ScaleDecision decide_scale(const ScaleView& v);

}  // namespace koi::cluster
