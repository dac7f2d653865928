// KV-aware routing on the Mooncake conversation trace — a SIMULATION, not a live run.
// Each request of ../shared/traces/mooncake_conversation.jsonl (its 512-token prefix block
// hashes, input and output lengths, arrival times) is routed by the gateway's own Router over
// 4 replicas. Each replica's prefix cache is modelled as an LRU set of block hashes (the
// ground truth; the router keeps its own approximate copy, as in the gateway). Load is
// modelled as requests in flight: a request occupies its replica for
//   uncached_prompt_tokens / prefill_tok_s + output_tokens / decode_tok_s   seconds.
// Reported per policy: prefix hit rate (cached blocks / prompt blocks), requests per replica
// (max / mean) and requests in flight at routing time (mean and max over replicas).
//   koi_bench_gateway_kv [trace.jsonl] [--replicas 4] [--cache-blocks 4096] [--cache-threshold 0.3]
#include <boost/json.hpp>
#include <cstdio>
#include <fstream>
#include <queue>
#include <string>
#include <vector>

#include "gateway/prefix_cache.h"
#include "gateway/router.h"

namespace gw = koi::gateway;

struct TraceRequest {
  double arrival_s;
  int64_t input_tokens, output_tokens;
  std::vector<uint64_t> blocks;
};

int main(int argc, char** argv) {
  std::string path = std::string(KOI_SHARED_DIR) + "/traces/mooncake_conversation.jsonl";
  size_t replicas = 4, cache_blocks = 4096;
  double cache_threshold = gw::KvAwareOptions{}.cache_threshold;
  const double prefill_tok_s = 20000, decode_tok_s = 40, block_tokens = 512;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--replicas" && i + 1 < argc) replicas = std::stoul(argv[++i]);
    else if (a == "--cache-blocks" && i + 1 < argc) cache_blocks = std::stoul(argv[++i]);
    else if (a == "--cache-threshold" && i + 1 < argc) cache_threshold = std::stod(argv[++i]);
    else path = a;
  }
  std::ifstream in(path);
  if (!in) {
    std::fprintf(stderr, "error: cannot open %s\n", path.c_str());
    return 1;
  }
  std::vector<TraceRequest> trace;
  for (std::string line; std::getline(in, line);) {
    boost::json::error_code ec;
    auto v = boost::json::parse(line, ec);
    if (ec) continue;
    auto& o = v.as_object();
    TraceRequest r{o.at("timestamp").to_number<double>() / 1000, o.at("input_length").to_number<int64_t>(),
                   o.at("output_length").to_number<int64_t>(), {}};
    for (auto& h : o.at("hash_ids").as_array()) r.blocks.push_back(h.to_number<uint64_t>());
    trace.push_back(std::move(r));
  }
  std::printf("trace %s: %zu requests over %.0f s; %zu replicas, %zu blocks (x%.0f tokens) of cache each\n", path.c_str(),
              trace.size(), trace.back().arrival_s, replicas, cache_blocks, block_tokens);
  std::printf("%-18s %9s %14s %15s %15s\n", "policy", "hit_rate", "req max/mean", "inflight mean", "inflight max");
  for (auto policy : {gw::RoutingPolicy::kRoundRobin, gw::RoutingPolicy::kLeastOutstanding, gw::RoutingPolicy::kKvAware}) {
    gw::KvAwareOptions kv;
    kv.blocks_per_replica = cache_blocks;
    kv.cache_threshold = cache_threshold;
    gw::Router router(policy, kv);
    std::vector<gw::LruBlockSet> caches(replicas, gw::LruBlockSet(cache_blocks));
    std::vector<std::string> ids;
    for (size_t i = 0; i < replicas; ++i) ids.push_back("replica-" + std::to_string(i));
    using Finish = std::pair<double, size_t>;
    std::priority_queue<Finish, std::vector<Finish>, std::greater<>> running;
    std::vector<int64_t> inflight(replicas, 0), served(replicas, 0);
    int64_t hit = 0, total = 0, inflight_max = 0;
    double inflight_sum = 0;
    for (const TraceRequest& r : trace) {
      while (!running.empty() && running.top().first <= r.arrival_s) {
        --inflight[running.top().second];
        running.pop();
      }
      std::vector<gw::Candidate> cands;
      for (size_t i = 0; i < replicas; ++i) cands.push_back({ids[i], inflight[i]});
      for (int64_t n : inflight) inflight_sum += static_cast<double>(n), inflight_max = std::max(inflight_max, n);
      const size_t chosen = router.pick({r.blocks, ""}, cands).index;
      const size_t matched = caches[chosen].match_prefix(r.blocks);
      caches[chosen].insert(r.blocks);
      hit += static_cast<int64_t>(matched);
      total += static_cast<int64_t>(r.blocks.size());
      const double uncached = std::max(0.0, static_cast<double>(r.input_tokens) - static_cast<double>(matched) * block_tokens);
      running.push({r.arrival_s + uncached / prefill_tok_s + static_cast<double>(r.output_tokens) / decode_tok_s, chosen});
      ++inflight[chosen];
      ++served[chosen];
    }
    const double mean_served = static_cast<double>(trace.size()) / static_cast<double>(replicas);
    const int64_t max_served = *std::max_element(served.begin(), served.end());
    static const char* kNames[] = {"round_robin", "least_outstanding", "kv_aware", "session"};
    std::printf("%-18s %9.3f %14.3f %15.2f %15lld\n", kNames[static_cast<int>(policy)],
                static_cast<double>(hit) / static_cast<double>(total), static_cast<double>(max_served) / mean_served,
                inflight_sum / static_cast<double>(trace.size() * replicas), static_cast<long long>(inflight_max));
  }
  return 0;
}
