// PrefillPool: a model's prefill workers (`koi serve --role prefill`) and the per-request
// decision of prefill/decode disaggregation, after llm-d's rule: a request is split only when
// the part of its prompt the chosen decode worker is not believed to hold (the uncached
// suffix) is at least `min_uncached_tokens` long; shorter ones are prefilled by the decode
// worker itself, where a transfer would cost more than it saves. For a split, the prefill
// worker is picked by the kv_aware rule (longest modelled prefix overlap while loads are
// balanced, else the least loaded) among those whose breaker allows, and the decode worker
// (the model's version replicas, picked by the fleet's policy) is told its KV address in the
// x-koi-prefill-peer header (docs/kv-transfer.md).
// Not thread-safe: Fleet calls it under its lock.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "gateway/circuit_breaker.h"
#include "gateway/config.h"
#include "gateway/router.h"

namespace koi::gateway {

// Whether a prompt of `prompt_tokens` (estimated) whose first `decode_matched` of
// `num_blocks` route blocks the decode worker holds is worth a transfer.
bool should_split(int64_t prompt_tokens, size_t num_blocks, size_t decode_matched, int64_t min_uncached_tokens);

struct PrefillChoice {
  std::string url;      // the prefill worker's HTTP URL (health checks, accounting)
  std::string kv_peer;  // its KV transfer address, HOST:PORT
};

class PrefillPool {
 public:
  PrefillPool(const PrefillConfig& config, const KvAwareOptions& kv, int breaker_failures, int64_t breaker_open_ns);

  // The prefill worker for a request, or nullopt to prefill on the decode worker (suffix too
  // short, or no prefill worker allowed by its breaker). The decode worker holds the first
  // `decode_matched` of the prompt's `route_blocks` blocks (text chunks, or engine blocks under
  // kv_events). A choice counts as outstanding until release().
  std::optional<PrefillChoice> choose(const RouteInput& input, int64_t prompt_tokens, size_t decode_matched,
                                      size_t route_blocks, int64_t now_ns);
  void release(const std::string& url);
  // Health-check results for a prefill worker (ignored for other URLs).
  void health_result(const std::string& url, bool ok, int64_t now_ns);
  std::vector<std::string> urls() const;

 private:
  struct Worker {
    std::string url;
    std::string kv_peer;
    CircuitBreaker breaker;
    int64_t outstanding = 0;
  };
  int64_t min_uncached_tokens_;
  std::vector<Worker> workers_;
  Router router_;
};

}  // namespace koi::gateway
