// What the DeploymentController reads from a `koi serve` replica: /health (ready or not)
// and /metrics (Prometheus text; the series named in src/serve/metrics.cc). Blocking calls
// on net::Client::fetch with a short deadline: they run on the reconciler's thread, against
// replicas on this machine or its network. parse_serve_metrics() is the pure part.
#pragma once

#include <map>
#include <string>

#include "base/status.h"

namespace koi::cluster {

struct ServeSample {
  double waiting = 0;       // koi:num_requests_waiting
  double running = 0;       // koi:num_requests_running
  double kv_usage = 0;      // koi:kv_cache_usage_perc (0-1)
  std::map<double, double> ttft_buckets;  // koi:time_to_first_token_seconds: le (s) -> cumulative count
  double ttft_count = 0;
  std::map<double, double> e2e_buckets;   // koi:e2e_request_latency_seconds: arrival to last token
  double e2e_count = 0;
  std::map<double, double> itl_buckets;   // koi:inter_token_latency_seconds
  double itl_count = 0;
  double generation_tokens = 0;           // koi:generation_tokens_total
  double finished = 0;      // koi:request_success_total: requests the engine finished (stop, length)
  double errors = 0;        // koi:http_responses_total of status >= 400 other than 429 (rollout.h)
};

ServeSample parse_serve_metrics(const std::string& text);

// ServeSample b minus a (counters and histograms); gauges are b's.
ServeSample sample_delta(const ServeSample& a, const ServeSample& b);
// The q-quantile (0-1) of a cumulative histogram, interpolated linearly inside the bucket as
// Prometheus' histogram_quantile() does; 0 when empty. In the buckets' unit.
double histogram_quantile(const std::map<double, double>& cumulative, double q);

// GET URL/health answered 200.
bool serve_ready(const std::string& base_url);
Result<ServeSample> scrape_serve(const std::string& base_url);

}  // namespace koi::cluster
