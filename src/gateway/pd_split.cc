#include "gateway/pd_split.h"

namespace koi::gateway {

bool should_split(int64_t prompt_tokens, size_t num_blocks, size_t decode_matched, int64_t min_uncached_tokens) {
  const double cached_share = num_blocks ? static_cast<double>(decode_matched) / static_cast<double>(num_blocks) : 0.0;
  const double uncached = static_cast<double>(prompt_tokens) * (1.0 - cached_share);
  return uncached >= static_cast<double>(min_uncached_tokens);
}

PrefillPool::PrefillPool(const PrefillConfig& config, const KvAwareOptions& kv, int breaker_failures,
                         int64_t breaker_open_ns)
    : min_uncached_tokens_(config.min_uncached_tokens), router_(RoutingPolicy::kKvAware, kv) {
  for (const PrefillReplicaConfig& r : config.replicas) {
    workers_.push_back({r.url, r.kv, CircuitBreaker(breaker_failures, breaker_open_ns), 0});
  }
}

std::optional<PrefillChoice> PrefillPool::choose(const RouteInput& input, int64_t prompt_tokens, size_t decode_matched,
                                                 size_t route_blocks, int64_t now_ns) {
  if (!should_split(prompt_tokens, route_blocks, decode_matched, min_uncached_tokens_)) return std::nullopt;
  std::vector<Candidate> candidates;
  std::vector<Worker*> allowed;
  for (Worker& w : workers_) {
    if (!w.breaker.would_allow(now_ns)) continue;
    candidates.push_back({w.url, w.outstanding});
    allowed.push_back(&w);
  }
  if (candidates.empty()) return std::nullopt;
  Worker& w = *allowed[router_.pick(input, candidates).index];
  ++w.outstanding;
  return PrefillChoice{w.url, w.kv_peer};
}

void PrefillPool::release(const std::string& url) {
  for (Worker& w : workers_) {
    if (w.url == url && w.outstanding > 0) --w.outstanding;
  }
}

void PrefillPool::health_result(const std::string& url, bool ok, int64_t now_ns) {
  for (Worker& w : workers_) {
    if (w.url != url) continue;
    if (!ok) {
      w.breaker.on_failure(now_ns);
    } else if (w.breaker.state() != BreakerState::kClosed && w.breaker.allow(now_ns)) {
      w.breaker.on_success();
    }
  }
}

std::vector<std::string> PrefillPool::urls() const {
  std::vector<std::string> out;
  for (const Worker& w : workers_) out.push_back(w.url);
  return out;
}

}  // namespace koi::gateway
