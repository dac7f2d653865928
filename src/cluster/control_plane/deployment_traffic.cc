#include "cluster/control_plane/deployment_traffic.h"

#include <algorithm>
#include <boost/json.hpp>

namespace koi::cluster {
namespace json = boost::json;

namespace {

std::string key_of(const std::string& ns, const std::string& name) { return ns + "/" + name; }

json::value ms_or_null(const std::optional<double>& ms) {
  return ms ? json::value(*ms) : json::value(nullptr);
}

// The median and p99 of summed histograms, in ms; none when they hold no observation.
void percentiles(const std::map<double, double>& cumulative, double count, std::optional<double>* p50,
                 std::optional<double>* p99) {
  if (count <= 0) return;
  *p50 = histogram_quantile(cumulative, 0.5) * 1000.0;
  *p99 = histogram_quantile(cumulative, 0.99) * 1000.0;
}

void add(const std::map<double, double>& from, std::map<double, double>* to) {
  for (const auto& [le, n] : from) (*to)[le] += n;
}

}  // namespace

TrafficPoint traffic_point(const std::vector<ServeSample>& deltas, double seconds, double now) {
  TrafficPoint p;
  p.time = now;
  p.replicas = static_cast<int>(deltas.size());
  std::map<double, double> ttft, e2e, itl;
  double ttft_count = 0, e2e_count = 0, itl_count = 0, requests = 0, errors = 0, tokens = 0;
  for (const ServeSample& d : deltas) {
    requests += d.finished + d.errors;
    errors += d.errors;
    tokens += d.generation_tokens;
    add(d.ttft_buckets, &ttft);
    add(d.e2e_buckets, &e2e);
    add(d.itl_buckets, &itl);
    ttft_count += d.ttft_count;
    e2e_count += d.e2e_count;
    itl_count += d.itl_count;
    p.running += d.running;
    p.waiting += d.waiting;
    p.kv_usage = std::max(p.kv_usage, d.kv_usage);
  }
  p.qps = requests / seconds;
  p.errors_per_second = errors / seconds;
  p.tokens_per_second = tokens / seconds;
  percentiles(ttft, ttft_count, &p.ttft_p50_ms, &p.ttft_p99_ms);
  percentiles(e2e, e2e_count, &p.e2e_p50_ms, &p.e2e_p99_ms);
  percentiles(itl, itl_count, &p.itl_p50_ms, &p.itl_p99_ms);
  return p;
}

json::object traffic_point_json(const TrafficPoint& p) {
  return json::object{{"time", p.time},
                      {"replicas", p.replicas},
                      {"qps", p.qps},
                      {"errorsPerSecond", p.errors_per_second},
                      {"ttftP50Ms", ms_or_null(p.ttft_p50_ms)},
                      {"ttftP99Ms", ms_or_null(p.ttft_p99_ms)},
                      {"e2eP50Ms", ms_or_null(p.e2e_p50_ms)},
                      {"e2eP99Ms", ms_or_null(p.e2e_p99_ms)},
                      {"itlP50Ms", ms_or_null(p.itl_p50_ms)},
                      {"itlP99Ms", ms_or_null(p.itl_p99_ms)},
                      {"tokensPerSecond", p.tokens_per_second},
                      {"running", p.running},
                      {"waiting", p.waiting},
                      {"kvCacheUsage", p.kv_usage}};
}

void TrafficHistory::record(const std::string& ns, const std::string& name, const TrafficPoint& p) {
  std::lock_guard lock(mu_);
  std::deque<TrafficPoint>& q = points_[key_of(ns, name)];
  q.push_back(p);
  while (q.size() > kTrafficPoints) q.pop_front();
}

void TrafficHistory::forget(const std::string& ns, const std::string& name) {
  std::lock_guard lock(mu_);
  points_.erase(key_of(ns, name));
}

std::vector<TrafficPoint> TrafficHistory::points(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mu_);
  auto it = points_.find(key_of(ns, name));
  if (it == points_.end()) return {};
  return {it->second.begin(), it->second.end()};
}

}  // namespace koi::cluster
