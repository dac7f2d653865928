#include "cluster/control_plane/autoscale.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace koi::cluster {

ScaleDecision decide_scale(const ScaleView& v) {
  ScaleDecision d;
  d.desired = std::clamp(v.desired, v.min_replicas, v.max_replicas);
  if (!v.policy.enabled) {
    d.desired = v.min_replicas;
    d.reason = "Fixed";
    d.message = fmt::format("fixed at replicas.min {} (no autoscale)", v.min_replicas);
    return d;
  }
  if (!v.metric || v.ready == 0) {
    d.reason = "NoMetrics";
    d.message = "no ready replica has reported metrics yet";
    return d;
  }
  // A hair below the exact quotient counts as it: 3 waiting / target 1.5 is 2 replicas, not 3.
  const double exact = static_cast<double>(v.ready) * *v.metric / v.policy.target;
  const int wanted = std::clamp(static_cast<int>(std::ceil(exact - 1e-9)), v.min_replicas, v.max_replicas);
  const std::string measured = fmt::format("{} {:.2f} per replica (target {}) over {} ready", 
                                           autoscale_metric_name(v.policy.metric), *v.metric, v.policy.target, v.ready);
  if (wanted > d.desired) {
    d.reason = "ScaledUp";
    d.message = fmt::format("{} -> {} replicas: {}", d.desired, wanted, measured);
    d.desired = wanted;
    return d;
  }
  if (v.ready < d.desired) {
    d.reason = "ScaleUpInProgress";
    d.message = fmt::format("{} of {} replicas ready", v.ready, d.desired);
    return d;
  }
  if (wanted == d.desired) {
    d.reason = "Steady";
    d.message = measured;
    return d;
  }
  d.down_since = v.down_since > 0 ? v.down_since : v.now;
  d.down_max = v.down_since > 0 ? std::max(v.down_max, wanted) : wanted;
  if (v.now - d.down_since >= v.policy.scale_down_delay_seconds) {
    d.reason = "ScaledDown";
    d.message = fmt::format("{} -> {} replicas after {:.0f} s below: {}", d.desired, d.down_max, v.now - d.down_since, measured);
    d.desired = d.down_max;
    d.down_since = 0, d.down_max = 0;
    return d;
  }
  d.reason = "ScaleDownPending";
  d.message = fmt::format("{} replicas would do ({}); waiting {:.0f} of {:.0f} s", d.down_max, measured,
                          v.now - d.down_since, v.policy.scale_down_delay_seconds);
  return d;
}

}  // namespace koi::cluster
