// Scheduling throughput of plan(): 5,000 nodes and 50,000 pending pods sampled from the
// Alibaba 2023 trace (node list tiled, pods drawn with replacement; fixed seed). One plan()
// call places as many pods as fit; "decisions/s" counts admitted pods per second of plan()
// time, "pods/s" counts pods considered (admitted or explained). See bench/README.md.
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>

#include "base/random.h"
#include "cluster/scheduler.h"
#include "cluster/spec.h"
#include "cluster/trace.h"

namespace koi::cluster {
namespace {

constexpr int kNodes = 5000;
constexpr int kPods = 50000;

struct Setup {
  Cluster cluster;
  std::vector<Job> pods;
};

const Setup& setup() {
  static const Setup* s = [] {
    std::string dir = std::string(KOI_SHARED_DIR) + "/traces/cluster/";
    Result<std::vector<NodeSpec>> nodes = read_alibaba_nodes(dir + "alibaba2023_openb_node_list_gpu_node.csv");
    Result<Trace> trace = read_trace(dir + "alibaba2023_openb_pod_list_default.csv");
    if (!nodes.ok() || !trace.ok()) {
      std::fprintf(stderr, "cannot read the Alibaba trace under %s\n", dir.c_str());
      std::exit(1);
    }
    std::vector<NodeSpec> tiled;
    for (int i = 0; i < kNodes; ++i) {
      NodeSpec n = (*nodes)[i % nodes->size()];
      n.name += "-" + std::to_string(i);
      tiled.push_back(std::move(n));
    }
    std::vector<QueueSpec> queues;
    for (const char* q : {"LS", "Burstable", "BE", "Guaranteed", "default"}) {
      QueueSpec spec;
      spec.name = q;
      queues.push_back(std::move(spec));
    }
    auto* out = new Setup{make_cluster(std::move(tiled), std::move(queues)), {}};
    std::vector<Job> all = *bind_work(out->cluster, trace->work);
    Rng rng(7);
    for (int i = 0; i < kPods; ++i) {
      Job j = all[rng.below(all.size())];
      j.id = i;
      j.submit_time = i;
      out->pods.push_back(std::move(j));
    }
    return out;
  }();
  return *s;
}

void BM_Plan(benchmark::State& state, const char* policy_name, int max_nodes_scored) {
  const Setup& s = setup();
  Policy policy = *policy_by_name(policy_name);
  policy.max_nodes_scored = max_nodes_scored;
  policy.workload = workload_of(s.pods);
  ClusterState empty = make_empty_state(s.cluster);
  size_t admitted = 0;
  for (auto _ : state) {
    Plan p = plan(empty, s.pods, 0, policy);
    admitted = p.decisions.size();
    benchmark::DoNotOptimize(p);
  }
  state.counters["admitted"] = static_cast<double>(admitted);
  state.counters["decisions/s"] =
      benchmark::Counter(static_cast<double>(admitted), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["pods/s"] = benchmark::Counter(kPods, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK_CAPTURE(BM_Plan, fifo, "fifo", 0)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_Plan, best_fit, "best-fit", 0)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_Plan, fgd_all_nodes, "fgd", 0)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_Plan, koi_fgd_all_nodes, "koi", 0)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK_CAPTURE(BM_Plan, koi_fgd_500_nodes, "koi", 500)->Unit(benchmark::kMillisecond)->Iterations(1);

}  // namespace
}  // namespace koi::cluster

BENCHMARK_MAIN();
