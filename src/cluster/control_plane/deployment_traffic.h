// The recent traffic of each Deployment, for the console's QPS and latency charts: one
// TrafficPoint per interval (about a second), summed over the replicas from the same /metrics
// scrapes the DeploymentController makes for rollouts and autoscaling (serve_probe.h).
//
// traffic_point() is the pure part: counter and histogram deltas of each replica over the
// interval -> rates and percentiles. TrafficHistory keeps the last kTrafficPoints points per
// deployment in memory (lost on a control-plane restart, as the controller's own memory is):
// the controller records on the reconciler's thread, the API reads on the server's workers;
// every method is thread-safe.
#pragma once

#include <boost/json/object.hpp>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "cluster/control_plane/serve_probe.h"

namespace koi::cluster {

inline constexpr size_t kTrafficPoints = 600;  // ten minutes at one point a second

struct TrafficPoint {
  double time = 0;                 // wall-clock seconds at the end of the interval
  int replicas = 0;                // replicas scraped
  double qps = 0;                  // requests finished (and failed) per second
  double errors_per_second = 0;
  std::optional<double> ttft_p50_ms, ttft_p99_ms;  // none when no request started
  std::optional<double> e2e_p50_ms, e2e_p99_ms;    // none when no request finished
  std::optional<double> itl_p50_ms, itl_p99_ms;    // between output tokens; none without any
  double tokens_per_second = 0;                    // generated
  double running = 0, waiting = 0;                 // gauges, summed at the end
  double kv_usage = 0;                             // the fullest replica's (0-1)
};

// `deltas`: each replica's sample_delta() over the interval of `seconds` (> 0) ending at `now`.
TrafficPoint traffic_point(const std::vector<ServeSample>& deltas, double seconds, double now);

boost::json::object traffic_point_json(const TrafficPoint& p);

class TrafficHistory {
 public:
  void record(const std::string& ns, const std::string& name, const TrafficPoint& p);
  void forget(const std::string& ns, const std::string& name);
  std::vector<TrafficPoint> points(const std::string& ns, const std::string& name) const;

 private:
  mutable std::mutex mu_;
  std::map<std::string, std::deque<TrafficPoint>> points_;  // "ns/name" -> oldest first
};

}  // namespace koi::cluster
