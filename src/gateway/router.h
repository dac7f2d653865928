// Router: picks the replica for a request among the healthy replicas of one version.
//   round_robin        rotate through the candidates.
//   least_outstanding  fewest requests in flight (ties: first candidate).
//   kv_aware           the SGLang-router rule: while the load is balanced, send the request to
//                      the replica whose modelled prefix cache matches the longest prefix of
//                      its blocks, if that covers at least `cache_threshold` of them; otherwise,
//                      or when loads are imbalanced (max - min > balance_abs and
//                      max > balance_rel * min), the least loaded one. The chosen replica's
//                      LruBlockSet then learns the request's blocks.
//   kv_events          the kv_aware rule over the real hit lengths: how many leading blocks of
//                      the prompt, hashed as the engine hashes them, each replica's prefix cache
//                      holds now, from the exact index its KV events keep (gateway/kv_index.h).
//                      Nothing is modelled; a request whose tokens are unknown, or replicas not
//                      synced yet, match 0 blocks and go to the least loaded replica.
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
#include "engine/block_hash.h"
#include "gateway/prefix_cache.h"

namespace koi::gateway {

enum class RoutingPolicy { kRoundRobin, kLeastOutstanding, kKvAware, kSession, kKvEvents };
class KvIndex;
Result<RoutingPolicy> parse_routing_policy(std::string_view name);

struct KvAwareOptions {
  double cache_threshold = 0.3;
  int64_t balance_abs = 8;
  double balance_rel = 1.5;
  size_t blocks_per_replica = 65536;  // capacity of each replica's modelled cache
};

struct RouteInput {
  std::span<const uint64_t> blocks;  // chained block hashes of the prompt text (kv_aware)
  std::string_view session;          // affinity key, "" for none
  int64_t prompt_tokens = 0;         // estimated, for the disaggregation decision
  std::span<const engine::BlockHash> kv_blocks;  // the prompt's engine block hashes (kv_events)
};

struct Candidate {
  std::string_view id;  // the replica URL
  int64_t outstanding = 0;
};

struct RouteDecision {
  size_t index = 0;           // into the candidates
  size_t matched_blocks = 0;  // prefix blocks the chosen replica's model already held
  size_t route_blocks = 0;    // the blocks matched_blocks counts in (blocks or kv_blocks)
};

class Router {
 public:
  // `index` is read by kv_events (and must then outlive the router); others ignore it.
  Router(RoutingPolicy policy, KvAwareOptions kv, const KvIndex* index = nullptr)
      : policy_(policy), kv_(kv), index_(index) {}

  // `candidates` must be non-empty.
  RouteDecision pick(const RouteInput& input, std::span<const Candidate> candidates);
  // Drops the modelled cache of a replica that was removed.
  void forget(std::string_view id) { caches_.erase(std::string(id)); }
  RoutingPolicy policy() const { return policy_; }

 private:
  LruBlockSet& cache_of(std::string_view id);
  size_t cache_affine(const RouteInput& input, std::span<const Candidate> candidates);
  size_t matched(const RouteInput& input, std::string_view id);
  RoutingPolicy policy_;
  KvAwareOptions kv_;
  const KvIndex* index_;
  uint64_t next_ = 0;
  std::unordered_map<std::string, LruBlockSet> caches_;
};

}  // namespace koi::gateway
