#include "serve/metrics.h"

#include <vector>

namespace koi::serve {
namespace {

// Latency buckets of vLLM's histograms, in seconds.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75,
                                          1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kItlBuckets = {0.001, 0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.075,
                                         0.1,   0.15,  0.2,  0.3,   0.4,  0.5,   0.75, 1.0,  2.5,  5.0};
const std::vector<double> kRequestBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                             20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0};
const std::vector<double> kTokenBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000};

}  // namespace

ServeMetrics::ServeMetrics(const std::string& model)
    : model_name(model),
      num_requests_running(registry.gauge("koi:num_requests_running", "Requests in the engine's running batch.",
                                          {"model_name"}).labels({model})),
      num_requests_waiting(registry.gauge("koi:num_requests_waiting", "Requests waiting to be scheduled.",
                                          {"model_name"}).labels({model})),
      kv_cache_usage_perc(registry.gauge("koi:kv_cache_usage_perc", "Fraction of KV-cache blocks in use (1 = full).",
                                         {"model_name"}).labels({model})),
      prefix_cache_queries(registry.counter("koi:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.",
                                            {"model_name"}).labels({model})),
      prefix_cache_hits(registry.counter("koi:prefix_cache_hits", "Prompt tokens found in the prefix cache.",
                                         {"model_name"}).labels({model})),
      num_preemptions(registry.counter("koi:num_preemptions", "Requests preempted (by recompute) for lack of KV blocks.",
                                       {"model_name"}).labels({model})),
      prompt_tokens(registry.counter("koi:prompt_tokens", "Prompt tokens of finished requests.", {"model_name"})
                        .labels({model})),
      generation_tokens(registry.counter("koi:generation_tokens", "Generated tokens.", {"model_name"}).labels({model})),
      spec_decode_num_draft_tokens(registry.counter("koi:spec_decode_num_draft_tokens", "Speculative draft tokens verified.",
                                                    {"model_name"}).labels({model})),
      spec_decode_num_accepted_tokens(registry.counter("koi:spec_decode_num_accepted_tokens",
                                                       "Speculative draft tokens accepted.", {"model_name"}).labels({model})),
      kv_transfer_imports(registry.counter("koi:kv_transfer_imports",
                                           "Requests whose prompt KV came from a prefill worker (decode role).",
                                           {"model_name"}).labels({model})),
      kv_transfer_fallbacks(registry.counter("koi:kv_transfer_fallbacks",
                                             "KV transfers that failed or timed out and were prefilled locally.",
                                             {"model_name"}).labels({model})),
      kv_transfer_exports(registry.counter("koi:kv_transfer_exports", "Prompts prefilled for a decode worker (prefill role).",
                                           {"model_name"}).labels({model})),
      kv_transfer_bytes(registry.counter("koi:kv_transfer_bytes", "KV bytes received from prefill workers.",
                                         {"model_name"}).labels({model})),
      kv_transfer_seconds(registry.histogram("koi:kv_transfer_seconds",
                                             "Time from the decode worker's block reservation to the first token's arrival.",
                                             {"model_name"}, kTtftBuckets).labels({model})),
      time_to_first_token(registry.histogram("koi:time_to_first_token_seconds", "Time from arrival to the first token.",
                                             {"model_name"}, kTtftBuckets).labels({model})),
      inter_token_latency(registry.histogram("koi:inter_token_latency_seconds", "Time between consecutive output tokens.",
                                             {"model_name"}, kItlBuckets).labels({model})),
      e2e_request_latency(registry.histogram("koi:e2e_request_latency_seconds", "Time from arrival to the last token.",
                                             {"model_name"}, kRequestBuckets).labels({model})),
      request_queue_time(registry.histogram("koi:request_queue_time_seconds",
                                            "Time from arrival to the start of the step that produced the first token.",
                                            {"model_name"}, kRequestBuckets).labels({model})),
      request_prompt_tokens(registry.histogram("koi:request_prompt_tokens", "Prompt tokens per request.", {"model_name"},
                                               kTokenBuckets).labels({model})),
      request_generation_tokens(registry.histogram("koi:request_generation_tokens", "Generated tokens per request.",
                                                   {"model_name"}, kTokenBuckets).labels({model})),
      engine_step(registry, model),
      request_success_(registry.counter("koi:request_success", "Finished requests by finish reason.",
                                        {"model_name", "finished_reason"})),
      http_responses_(registry.counter("koi:http_responses", "HTTP responses by status code.", {"model_name", "status"})) {
  for (const char* reason : {"stop", "length", "abort"}) request_success(reason);
}

metrics::Counter& ServeMetrics::request_success(const std::string& finished_reason) {
  return request_success_.labels({model_name, finished_reason});
}

metrics::Counter& ServeMetrics::http_responses(int status) {
  return http_responses_.labels({model_name, std::to_string(status)});
}

}  // namespace koi::serve
