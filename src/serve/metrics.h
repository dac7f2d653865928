// ServeMetrics: the metrics `koi serve` exports, as references into its own
// metrics::Registry (base/metrics.h), named after vLLM's where one exists
// (vllm:num_requests_running -> koi:num_requests_running, ...), so operators' dashboards
// carry over by changing the prefix. Every series carries model_name="...". Thread-safety
// is the registry's: updates are relaxed atomics, render() is safe at any time.
#pragma once

#include <string>

#include "base/metrics.h"
#include "serve/step_metrics.h"

namespace koi::serve {

struct ServeMetrics {
  explicit ServeMetrics(const std::string& model_name);

  metrics::Registry registry;
  std::string model_name;
  metrics::Gauge& num_requests_running;
  metrics::Gauge& num_requests_waiting;
  metrics::Gauge& kv_cache_usage_perc;
  metrics::Counter& prefix_cache_queries;
  metrics::Counter& prefix_cache_hits;
  metrics::Counter& num_preemptions;
  metrics::Counter& prompt_tokens;
  metrics::Counter& generation_tokens;
  metrics::Counter& spec_decode_num_draft_tokens;
  metrics::Counter& spec_decode_num_accepted_tokens;
  // Prefill/decode disaggregation (serve/kv_transfer_*.h).
  metrics::Counter& kv_transfer_imports;
  metrics::Counter& kv_transfer_fallbacks;
  metrics::Counter& kv_transfer_exports;
  metrics::Counter& kv_transfer_bytes;
  metrics::Histogram& kv_transfer_seconds;
  metrics::Histogram& time_to_first_token;
  metrics::Histogram& inter_token_latency;
  metrics::Histogram& e2e_request_latency;
  metrics::Histogram& request_queue_time;
  metrics::Histogram& request_prompt_tokens;
  metrics::Histogram& request_generation_tokens;
  // koi:request_success_total{finished_reason="stop"|"length"|"abort"}
  metrics::Counter& request_success(const std::string& finished_reason);
  // koi:http_responses_total{status="400"}: every HTTP response by status.
  metrics::Counter& http_responses(int status);
  EngineStepMetrics engine_step;  // koi:engine_step_* (step_metrics.h)

 private:
  metrics::Family<metrics::Counter> request_success_;
  metrics::Family<metrics::Counter> http_responses_;
};

}  // namespace koi::serve
