#include "gateway/router.h"

#include <algorithm>

#include "gateway/kv_index.h"

namespace koi::gateway {

Result<RoutingPolicy> parse_routing_policy(std::string_view name) {
  if (name == "round_robin") return RoutingPolicy::kRoundRobin;
  if (name == "least_outstanding") return RoutingPolicy::kLeastOutstanding;
  if (name == "kv_aware") return RoutingPolicy::kKvAware;
  if (name == "session") return RoutingPolicy::kSession;
  if (name == "kv_events") return RoutingPolicy::kKvEvents;
  return Status::invalid_argument("routing policy '" + std::string(name) +
                                  "' is unknown; use round_robin, least_outstanding, kv_aware, kv_events or session");
}

namespace {

size_t least_loaded(std::span<const Candidate> c) {
  size_t best = 0;
  for (size_t i = 1; i < c.size(); ++i) {
    if (c[i].outstanding < c[best].outstanding) best = i;
  }
  return best;
}

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

uint64_t hash_text(std::string_view s, uint64_t seed) {
  uint64_t h = seed ^ 1469598103934665603ull;
  for (unsigned char ch : s) h = (h ^ ch) * 1099511628211ull;
  return mix(h);
}

}  // namespace

LruBlockSet& Router::cache_of(std::string_view id) {
  auto it = caches_.find(std::string(id));
  if (it == caches_.end()) it = caches_.emplace(std::string(id), LruBlockSet(kv_.blocks_per_replica)).first;
  return it->second;
}

size_t Router::matched(const RouteInput& input, std::string_view id) {
  if (policy_ == RoutingPolicy::kKvEvents) return index_ ? index_->match(id, input.kv_blocks) : 0;
  return cache_of(id).match_prefix(input.blocks);
}

// The SGLang-router rule (see router.h) over matched().
size_t Router::cache_affine(const RouteInput& input, std::span<const Candidate> candidates) {
  auto [lo, hi] = std::minmax_element(candidates.begin(), candidates.end(),
                                      [](const Candidate& a, const Candidate& b) { return a.outstanding < b.outstanding; });
  const bool imbalanced = hi->outstanding - lo->outstanding > kv_.balance_abs &&
                          static_cast<double>(hi->outstanding) > kv_.balance_rel * static_cast<double>(lo->outstanding);
  if (imbalanced) return least_loaded(candidates);
  size_t best = least_loaded(candidates), best_match = 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    const size_t m = matched(input, candidates[i].id);
    if (m > best_match || (m == best_match && m > 0 && candidates[i].outstanding < candidates[best].outstanding)) {
      best = i;
      best_match = m;
    }
  }
  const size_t total = policy_ == RoutingPolicy::kKvEvents ? input.kv_blocks.size() : input.blocks.size();
  if (static_cast<double>(best_match) < kv_.cache_threshold * static_cast<double>(total)) return least_loaded(candidates);
  return best;
}

RouteDecision Router::pick(const RouteInput& input, std::span<const Candidate> candidates) {
  RouteDecision d;
  switch (policy_) {
    case RoutingPolicy::kRoundRobin:
      d.index = next_++ % candidates.size();
      break;
    case RoutingPolicy::kLeastOutstanding:
      d.index = least_loaded(candidates);
      break;
    case RoutingPolicy::kSession:
      if (input.session.empty()) {
        d.index = least_loaded(candidates);
      } else {
        const uint64_t key = hash_text(input.session, 0);
        uint64_t best_score = 0;
        for (size_t i = 0; i < candidates.size(); ++i) {
          const uint64_t score = hash_text(candidates[i].id, key);
          if (i == 0 || score > best_score) best_score = score, d.index = i;
        }
      }
      break;
    case RoutingPolicy::kKvAware:
    case RoutingPolicy::kKvEvents:
      d.index = cache_affine(input, candidates);
      break;
  }
  if (policy_ == RoutingPolicy::kKvEvents) {
    d.matched_blocks = matched(input, candidates[d.index].id);
    d.route_blocks = input.kv_blocks.size();
  } else if (!input.blocks.empty()) {
    LruBlockSet& cache = cache_of(candidates[d.index].id);
    d.matched_blocks = cache.match_prefix(input.blocks);
    d.route_blocks = input.blocks.size();
    cache.insert(input.blocks);
  }
  return d;
}

}  // namespace koi::gateway
