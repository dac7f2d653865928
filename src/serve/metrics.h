// Metrics in the Prometheus text exposition format (version 0.0.4).
//
// A MetricsRegistry owns families of series (counters, gauges, histograms), each series a
// fixed label set. Series are created up front (or on first use under the registry lock)
// and never removed, so references to them stay valid for the registry's life. Updating a
// Scalar is a relaxed atomic; a Histogram takes its own small lock. render() is safe to
// call from any thread at any time.
//
// ServeMetrics is the set `koi serve` exports, named after vLLM's where one exists
// (vllm:num_requests_running -> koi:num_requests_running, ...), so operators' dashboards
// carry over by changing the prefix.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace koi::serve {

// A counter or gauge value.
class Scalar {
 public:
  void inc(double delta = 1.0) {
    double old = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
    }
  }
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  // `bounds`: the upper bounds of the buckets, ascending; +Inf is implied.
  explicit Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {}
  void observe(double v);
  // Appends the _bucket, _sum and _count lines of this series.
  void render(const std::string& name, const std::string& labels, std::string* out) const;
  int64_t count() const;

 private:
  std::vector<double> bounds_;
  mutable std::mutex mu_;
  std::vector<int64_t> counts_;  // per bucket (not cumulative); last is +Inf
  double sum_ = 0.0;
  int64_t count_ = 0;
};

class MetricsRegistry {
 public:
  // `labels` is the label set in exposition syntax without braces: model_name="m",reason="stop".
  Scalar& counter(const std::string& name, const std::string& help, const std::string& labels);
  Scalar& gauge(const std::string& name, const std::string& help, const std::string& labels);
  Histogram& histogram(const std::string& name, const std::string& help, const std::string& labels,
                       std::vector<double> bounds);
  std::string render() const;

 private:
  struct Family {
    std::string name, help, type;
    std::map<std::string, std::unique_ptr<Scalar>> scalars;        // by labels
    std::map<std::string, std::unique_ptr<Histogram>> histograms;  // by labels
  };
  Family& family(const std::string& name, const std::string& help, const std::string& type);

  mutable std::mutex mu_;
  std::deque<Family> families_;  // in registration order
};

struct ServeMetrics {
  explicit ServeMetrics(const std::string& model_name);

  MetricsRegistry registry;
  std::string labels;  // model_name="..."
  Scalar& num_requests_running;
  Scalar& num_requests_waiting;
  Scalar& kv_cache_usage_perc;
  Scalar& prefix_cache_queries;
  Scalar& prefix_cache_hits;
  Scalar& num_preemptions;
  Scalar& spec_decode_num_draft_tokens;
  Scalar& spec_decode_num_accepted_tokens;
  Scalar& prompt_tokens;
  Scalar& generation_tokens;
  Histogram& time_to_first_token;
  Histogram& inter_token_latency;
  Histogram& e2e_request_latency;
  Histogram& request_queue_time;
  Histogram& request_prompt_tokens;
  Histogram& request_generation_tokens;
  // koi:request_success_total{finished_reason="stop"|"length"|"abort"}
  Scalar& request_success(const std::string& finished_reason);
  // koi:http_requests_total{status="400"}: every HTTP response by status.
  Scalar& http_responses(int status);
};

// "a\"b" -> a\\\"b: a label value escaped for the exposition format.
std::string escape_label_value(const std::string& v);

}  // namespace koi::serve
