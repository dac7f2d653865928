// Load generation for `koi bench serve` (the `vllm bench serve` experience): request shapes
// from a public trace (Azure LLM inference CSV, Mooncake JSONL) or synthetic, sent as
// streaming /v1/completions requests at a fixed Poisson rate or a fixed concurrency, and
// the latency report: throughput, time to first token, inter-token latency and end-to-end
// latency (mean, p50, p90, p99) and the error count.
//
// Prompts are token ids, so input lengths are exact; Mooncake hash_ids become the same
// token blocks for the same id (512 tokens each, as in the trace, or fewer to fit a small
// model's context: trace_block_tokens), so prefix reuse in the trace is replayed. The same
// workload can run against the engine in process (run_in_process) to measure what HTTP adds.
// Functions block until the run ends; failures of single requests are counted, not fatal.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <boost/json.hpp>

#include "base/status.h"
#include "base/trace.h"

namespace koi::serve {

struct RequestShape {
  std::vector<int32_t> prompt;  // token ids
  int output_tokens = 0;
};

struct WorkloadConfig {
  std::string trace;          // "" = synthetic; *.csv = Azure; *.jsonl = Mooncake
  int num_requests = 100;
  int input_len = 128;        // synthetic
  int output_len = 64;        // synthetic
  int max_input_len = 1024;   // trace lengths are clipped to these (small models)
  int max_output_len = 256;
  double input_scale = 1.0;   // Azure trace prompt lengths are multiplied by this, then clipped
  int trace_block_tokens = 512;  // Mooncake: tokens per hash id (the trace's 512, or fewer)
  int32_t vocab_lo = 100;     // prompt token ids are drawn from [vocab_lo, vocab_hi)
  int32_t vocab_hi = 500;
  uint64_t seed = 0;
};
Result<std::vector<RequestShape>> make_workload(const WorkloadConfig& config);

struct LoadConfig {
  std::string url;            // http://host:port
  std::string model;          // "": the server's only model (GET /v1/models)
  std::string api_key;
  double request_rate = 0.0;  // requests per second (Poisson); 0 = all at once
  int max_concurrency = 0;    // 0 = unbounded
  uint64_t seed = 0;
  std::vector<std::pair<std::string, std::string>> headers;  // sent with every request
  // Goodput: requests with TTFT <= slo_ttft_ms and mean ITL <= slo_itl_ms (0: no bound).
  double slo_ttft_ms = 0.0;
  double slo_itl_ms = 0.0;
};

// One request as the client saw it; times in seconds.
struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0.0;
  double e2e = 0.0;
  std::vector<double> itl;
  int input_tokens = 0;
  int output_tokens = 0;
};

struct LatencyStats {
  double mean = 0, p50 = 0, p90 = 0, p99 = 0;  // milliseconds
};

struct BenchReport {
  double duration_s = 0;
  int completed = 0;
  int errors = 0;
  int good = 0;                 // completed within the SLOs (all completed when none is set)
  double slo_ttft_ms = 0.0, slo_itl_ms = 0.0;
  int64_t input_tokens = 0;
  int64_t output_tokens = 0;
  LatencyStats ttft, itl, e2e;
  std::vector<std::string> first_errors;  // up to 5
};

// Sends every shape over HTTP as a streaming completion (ignore_eos, exact max_tokens). With
// no config.model, the server's only model from GET /v1/models is sent (an error lists them
// when there are several).
Result<BenchReport> run_http(const LoadConfig& config, const std::vector<RequestShape>& shapes);
// The one model id in a /v1/models body, or an error naming the ones there are.
Result<std::string> only_served_model(std::string_view models_json, std::string_view url);
// The same workload through an EngineService in this process, no HTTP: the baseline. With
// `trace`, the engine records its profile there (engine/step_trace.h; `koi bench serve --profile`).
Result<BenchReport> run_in_process(const std::string& model_path, const LoadConfig& config,
                                   const std::vector<RequestShape>& shapes, trace::Recorder* trace = nullptr);

BenchReport summarize(const std::vector<RequestResult>& results, double duration_s, double slo_ttft_ms = 0,
                      double slo_itl_ms = 0);
LatencyStats latency_stats(std::vector<double> seconds);
boost::json::object report_json(const BenchReport& report);
std::string report_text(const BenchReport& report);

}  // namespace koi::serve
