#include "serve/metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace koi::serve {
namespace {

std::string series_name(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

std::string format_value(double v) { return fmt::format("{}", v); }

// Latency buckets of vLLM's histograms, in seconds.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kItlBuckets = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                         0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5,  5.0};
const std::vector<double> kRequestBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                             20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
const std::vector<double> kTokenBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void Histogram::observe(double v) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  std::lock_guard lock(mu_);
  ++counts_[bucket];
  sum_ += v;
  ++count_;
}

int64_t Histogram::count() const {
  std::lock_guard lock(mu_);
  return count_;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  std::lock_guard lock(mu_);
  const std::string sep = labels.empty() ? "" : labels + ",";
  int64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i];
    const std::string le = i < bounds_.size() ? format_value(bounds_[i]) : "+Inf";
    *out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, sep, le, cumulative);
  }
  *out += fmt::format("{} {}\n", series_name(name + "_sum", labels), format_value(sum_));
  *out += fmt::format("{} {}\n", series_name(name + "_count", labels), count_);
}

MetricsRegistry::Family& MetricsRegistry::family(const std::string& name, const std::string& help,
                                                 const std::string& type) {
  for (Family& f : families_) {
    if (f.name == name) return f;
  }
  families_.push_back({name, help, type, {}, {}});
  return families_.back();
}

Scalar& MetricsRegistry::counter(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard lock(mu_);
  auto& slot = family(name, help, "counter").scalars[labels];
  if (!slot) slot = std::make_unique<Scalar>();
  return *slot;
}

Scalar& MetricsRegistry::gauge(const std::string& name, const std::string& help, const std::string& labels) {
  std::lock_guard lock(mu_);
  auto& slot = family(name, help, "gauge").scalars[labels];
  if (!slot) slot = std::make_unique<Scalar>();
  return *slot;
}

Histogram& MetricsRegistry::histogram(const std::string& name, const std::string& help, const std::string& labels,
                                      std::vector<double> bounds) {
  std::lock_guard lock(mu_);
  auto& slot = family(name, help, "histogram").histograms[labels];
  if (!slot) slot = std::make_unique<Histogram>(std::move(bounds));
  return *slot;
}

std::string MetricsRegistry::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const Family& f : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, f.type);
    // Counters are exposed with the _total suffix, as Prometheus clients do.
    const std::string sample = f.type == "counter" ? f.name + "_total" : f.name;
    for (const auto& [labels, s] : f.scalars) out += fmt::format("{} {}\n", series_name(sample, labels), format_value(s->value()));
    for (const auto& [labels, h] : f.histograms) h->render(f.name, labels, &out);
  }
  return out;
}

ServeMetrics::ServeMetrics(const std::string& model_name)
    : labels("model_name=\"" + escape_label_value(model_name) + "\""),
      num_requests_running(registry.gauge("koi:num_requests_running", "Requests in the engine's running batch.", labels)),
      num_requests_waiting(registry.gauge("koi:num_requests_waiting", "Requests waiting to be scheduled.", labels)),
      kv_cache_usage_perc(registry.gauge("koi:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).", labels)),
      prefix_cache_queries(registry.counter("koi:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", labels)),
      prefix_cache_hits(registry.counter("koi:prefix_cache_hits", "Prompt tokens found in the prefix cache.", labels)),
      num_preemptions(registry.counter("koi:num_preemptions", "Requests preempted (by recompute) for lack of KV blocks.", labels)),
      spec_decode_num_draft_tokens(registry.counter("koi:spec_decode_num_draft_tokens", "Speculative draft tokens verified.", labels)),
      spec_decode_num_accepted_tokens(registry.counter("koi:spec_decode_num_accepted_tokens", "Speculative draft tokens accepted.", labels)),
      prompt_tokens(registry.counter("koi:prompt_tokens", "Prompt tokens of finished requests.", labels)),
      generation_tokens(registry.counter("koi:generation_tokens", "Generated tokens.", labels)),
      time_to_first_token(registry.histogram("koi:time_to_first_token_seconds", "Time from arrival to the first token.",
                                             labels, kTtftBuckets)),
      inter_token_latency(registry.histogram("koi:inter_token_latency_seconds", "Time between consecutive output tokens.",
                                             labels, kItlBuckets)),
      e2e_request_latency(registry.histogram("koi:e2e_request_latency_seconds", "Time from arrival to the last token.",
                                             labels, kRequestBuckets)),
      request_queue_time(registry.histogram("koi:request_queue_time_seconds",
                                            "Time from arrival to the start of the step that produced the first token.",
                                            labels, kRequestBuckets)),
      request_prompt_tokens(registry.histogram("koi:request_prompt_tokens", "Prompt tokens per request.", labels,
                                               kTokenBuckets)),
      request_generation_tokens(registry.histogram("koi:request_generation_tokens", "Generated tokens per request.",
                                                   labels, kTokenBuckets)) {
  for (const char* reason : {"stop", "length", "abort"}) request_success(reason);
}

Scalar& ServeMetrics::request_success(const std::string& finished_reason) {
  return registry.counter("koi:request_success", "Finished requests by finish reason.",
                          labels + ",finished_reason=\"" + finished_reason + "\"");
}

Scalar& ServeMetrics::http_responses(int status) {
  return registry.counter("koi:http_responses", "HTTP responses by status code.",
                          labels + ",status=\"" + std::to_string(status) + "\"");
}

}  // namespace koi::serve
