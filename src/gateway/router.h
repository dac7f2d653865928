// Router: picks the replica for a request among the healthy replicas of one version.
//   round_robin        rotate through the candidates.
//   least_outstanding  fewest requests in flight (ties: first candidate).
//   kv_aware           the SGLang-router rule: while the load is balanced, send the request to
//                      the replica whose modelled prefix cache matches the longest prefix of
//                      its blocks, if that covers at least `cache_threshold` of them; otherwise,
//                      or when loads are imbalanced (max - min > balance_abs and
//                      max > balance_rel * min), the least loaded one. The chosen replica's
//                      LruBlockSet then learns the request's blocks.
//   session            rendezvous hash of the session key over the candidates, so a session
//                      stays on its replica while that replica is healthy; no key: least load.
// Not thread-safe (the gateway calls it under its state lock).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "gateway/prefix_cache.h"

namespace koi::gateway {

enum class RoutingPolicy { kRoundRobin, kLeastOutstanding, kKvAware, kSession };
Result<RoutingPolicy> parse_routing_policy(std::string_view name);

struct KvAwareOptions {
  double cache_threshold = 0.3;
  int64_t balance_abs = 8;
  double balance_rel = 1.5;
  size_t blocks_per_replica = 65536;  // capacity of each replica's modelled cache
};

struct RouteInput {
  std::span<const uint64_t> blocks;  // chained block hashes of the prompt
  std::string_view session;          // affinity key, "" for none
  int64_t prompt_tokens = 0;         // estimated, for the disaggregation decision
};

struct Candidate {
  std::string_view id;  // the replica URL
  int64_t outstanding = 0;
};

struct RouteDecision {
  size_t index = 0;           // into the candidates
  size_t matched_blocks = 0;  // prefix blocks the chosen replica's model already held
};

class Router {
 public:
  Router(RoutingPolicy policy, KvAwareOptions kv) : policy_(policy), kv_(kv) {}

  // `candidates` must be non-empty.
  RouteDecision pick(const RouteInput& input, std::span<const Candidate> candidates);
  // Drops the modelled cache of a replica that was removed.
  void forget(std::string_view id) { caches_.erase(std::string(id)); }
  RoutingPolicy policy() const { return policy_; }

 private:
  LruBlockSet& cache_of(std::string_view id);
  RoutingPolicy policy_;
  KvAwareOptions kv_;
  uint64_t next_ = 0;
  std::unordered_map<std::string, LruBlockSet> caches_;
};

}  // namespace koi::gateway
