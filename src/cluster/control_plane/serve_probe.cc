#include "cluster/control_plane/serve_probe.h"

#include <cmath>
#include <cstdlib>
#include <limits>
#include <string_view>

#include "net/client.h"

namespace koi::cluster {
namespace {

constexpr auto kProbeTimeout = std::chrono::milliseconds(1000);

// The value of label `key` in `labels` ({a="x",b="y"}), "" when absent.
std::string label(std::string_view labels, std::string_view key) {
  const std::string needle = std::string(key) + "=\"";
  size_t at = labels.find(needle);
  while (at != std::string_view::npos && at > 0 && labels[at - 1] != '{' && labels[at - 1] != ',') {
    at = labels.find(needle, at + 1);
  }
  if (at == std::string_view::npos) return "";
  const size_t start = at + needle.size();
  const size_t end = labels.find('"', start);
  return std::string(labels.substr(start, end == std::string_view::npos ? std::string_view::npos : end - start));
}

double parse_le(const std::string& le) {
  if (le == "+Inf") return std::numeric_limits<double>::infinity();
  return std::strtod(le.c_str(), nullptr);
}

// Cumulative bucket counts: `*b` minus `a`, bucket by bucket.
void subtract(const std::map<double, double>& a, std::map<double, double>* b) {
  for (auto& [le, n] : *b) {
    auto it = a.find(le);
    if (it != a.end()) n -= it->second;
  }
}

}  // namespace

ServeSample parse_serve_metrics(const std::string& text) {
  ServeSample s;
  std::string_view rest(text);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    std::string_view line = rest.substr(0, nl);
    rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    if (line.empty() || line[0] == '#') continue;
    const size_t brace = line.find('{');
    const size_t space = line.rfind(' ');
    if (space == std::string_view::npos) continue;
    const std::string_view name = line.substr(0, std::min(brace, line.find(' ')));
    const std::string_view labels = brace == std::string_view::npos ? std::string_view() : line.substr(brace, line.find('}') - brace + 1);
    const double value = std::strtod(std::string(line.substr(space + 1)).c_str(), nullptr);
    if (name == "koi:num_requests_waiting") {
      s.waiting += value;
    } else if (name == "koi:num_requests_running") {
      s.running += value;
    } else if (name == "koi:kv_cache_usage_perc") {
      s.kv_usage = std::max(s.kv_usage, value);
    } else if (name == "koi:time_to_first_token_seconds_bucket") {
      s.ttft_buckets[parse_le(label(labels, "le"))] += value;
    } else if (name == "koi:time_to_first_token_seconds_count") {
      s.ttft_count += value;
    } else if (name == "koi:e2e_request_latency_seconds_bucket") {
      s.e2e_buckets[parse_le(label(labels, "le"))] += value;
    } else if (name == "koi:e2e_request_latency_seconds_count") {
      s.e2e_count += value;
    } else if (name == "koi:inter_token_latency_seconds_bucket") {
      s.itl_buckets[parse_le(label(labels, "le"))] += value;
    } else if (name == "koi:inter_token_latency_seconds_count") {
      s.itl_count += value;
    } else if (name == "koi:generation_tokens_total") {
      s.generation_tokens += value;
    } else if (name == "koi:http_responses_total") {
      const int status = std::atoi(label(labels, "status").c_str());
      if (status >= 400 && status != 429) s.errors += value;
    } else if (name == "koi:request_success_total") {
      if (label(labels, "finished_reason") != "abort") s.finished += value;
    }
  }
  return s;
}

ServeSample sample_delta(const ServeSample& a, const ServeSample& b) {
  ServeSample d = b;
  subtract(a.ttft_buckets, &d.ttft_buckets);
  subtract(a.e2e_buckets, &d.e2e_buckets);
  subtract(a.itl_buckets, &d.itl_buckets);
  d.ttft_count -= a.ttft_count;
  d.e2e_count -= a.e2e_count;
  d.itl_count -= a.itl_count;
  d.generation_tokens -= a.generation_tokens;
  d.finished -= a.finished;
  d.errors -= a.errors;
  return d;
}

double histogram_quantile(const std::map<double, double>& cumulative, double q) {
  if (cumulative.empty()) return 0;
  const double total = cumulative.rbegin()->second;
  if (total <= 0) return 0;
  const double rank = q * total;
  double lower = 0, below = 0;
  for (const auto& [le, count] : cumulative) {
    if (count >= rank) {
      if (std::isinf(le)) return lower;  // beyond the largest finite bucket: its bound
      const double in_bucket = count - below;
      return in_bucket > 0 ? lower + (le - lower) * (rank - below) / in_bucket : le;
    }
    lower = le, below = count;
  }
  return lower;
}

bool serve_ready(const std::string& base_url) {
  auto r = net::Client::fetch(base_url + "/health", "GET", "", {}, kProbeTimeout);
  return r.ok() && r->status == 200;
}

Result<ServeSample> scrape_serve(const std::string& base_url) {
  KOI_ASSIGN_OR_RETURN(net::Response r, net::Client::fetch(base_url + "/metrics", "GET", "", {}, kProbeTimeout));
  if (r.status != 200) return Status::unavailable(base_url + "/metrics answered " + std::to_string(r.status));
  return parse_serve_metrics(r.body);
}

}  // namespace koi::cluster
