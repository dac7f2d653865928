// Randomized invariants over random clusters and workloads, replayed through the simulator:
// nothing over-allocated, quotas held, gangs whole, topology held, runs deterministic, plans
// settle (no preemption cycle at any instant).
// KOI_CLUSTER_RANDOM_RUNS sets the number of random cases (default 150, the `slow` test 3000).
#include <gtest/gtest.h>

#include <cstdlib>

#include "base/random.h"
#include "cluster/placement.h"
#include "cluster/quota.h"
#include "cluster/simulator.h"

namespace koi::cluster {
namespace {

int runs() {
  const char* env = std::getenv("KOI_CLUSTER_RANDOM_RUNS");
  return env ? std::atoi(env) : 150;
}

Cluster random_cluster(Rng& rng) {
  std::vector<NodeSpec> nodes;
  int n = 2 + static_cast<int>(rng.below(10));
  for (int i = 0; i < n; ++i) {
    NodeSpec s;
    s.name = "n" + std::to_string(i);
    s.gpu_count = static_cast<int>(rng.below(9));
    s.gpu_type = s.gpu_count > 0 ? (rng.below(2) ? "A" : "B") : "";
    s.mig_slices = s.gpu_count > 0 && rng.below(4) == 0 ? 7 : 0;
    s.cpu_milli = 8000 + 8000 * static_cast<int64_t>(rng.below(8));
    s.memory_mib = 65536;
    s.nvlink_domain = "nvl" + std::to_string(i / 2);
    s.leaf_switch = "leaf" + std::to_string(i / 4);
    s.spine = "spine" + std::to_string(i / 8);
    nodes.push_back(std::move(s));
  }
  std::vector<QueueSpec> queues;
  int q = 1 + static_cast<int>(rng.below(3));
  for (int i = 0; i < q; ++i) {
    QueueSpec spec;
    spec.name = "q" + std::to_string(i);
    spec.cohort = rng.below(3) ? "c" : "";
    spec.priority = static_cast<int>(rng.below(2));
    if (rng.below(4)) {
      int64_t borrow = rng.below(2) ? static_cast<int64_t>(rng.below(4)) * 1000 : -1;
      int64_t lend = rng.below(2) ? static_cast<int64_t>(rng.below(4)) * 1000 : -1;
      spec.quota["gpu"] = {.nominal = static_cast<int64_t>(rng.below(12)) * 1000, .borrowing_limit = borrow, .lending_limit = lend};
    }
    queues.push_back(std::move(spec));
  }
  return make_cluster(std::move(nodes), std::move(queues));
}

std::vector<Job> random_jobs(Rng& rng, const Cluster& c) {
  std::vector<Job> jobs;
  int n = 5 + static_cast<int>(rng.below(40));
  for (int i = 0; i < n; ++i) {
    Job j;
    j.id = i;
    j.name = "j" + std::to_string(i);
    j.queue = static_cast<int>(rng.below(c.queues.size()));
    j.priority = static_cast<int>(rng.below(3));
    j.preemptible = rng.below(4) != 0;
    j.submit_time = static_cast<double>(rng.below(100));
    j.duration = 1 + static_cast<double>(rng.below(60));
    j.request.cpu_milli = 1000 * static_cast<int64_t>(rng.below(8));
    j.request.memory_mib = 1024 * static_cast<int64_t>(rng.below(16));
    switch (rng.below(4)) {
      case 0: break;  // CPU only
      case 1:
        j.request.gpus = 1;
        j.request.gpu_milli = 100 * (1 + static_cast<int>(rng.below(9)));
        break;
      case 2:
        j.request.gpus = 1;
        j.request.mig_slices = 1 + static_cast<int>(rng.below(4));
        break;
      default: j.request.gpus = 1 + static_cast<int>(rng.below(8));
    }
    j.min_replicas = 1 + static_cast<int>(rng.below(4));
    j.max_replicas = j.min_replicas + (rng.below(3) == 0 ? static_cast<int>(rng.below(3)) : 0);
    j.topology = static_cast<Topology>(rng.below(4));
    if (rng.below(4) == 0 && !c.gpu_types.empty()) j.gpu_types = {static_cast<int>(rng.below(c.gpu_types.size()))};
    jobs.push_back(std::move(j));
  }
  return jobs;
}

void check_state(const ClusterState& s, const Plan& p) {
  const Cluster& c = *s.cluster;
  std::vector<NodeFree> free(c.nodes.size());
  for (size_t n = 0; n < c.nodes.size(); ++n) free[n] = c.capacity(static_cast<int>(n));
  for (const RunningJob& r : s.running) {
    int count = static_cast<int>(r.replicas.size());
    ASSERT_GE(count, r.job.min_replicas) << r.job.name << ": a gang is partially placed";
    ASSERT_LE(count, r.job.max_replicas) << r.job.name;
    int level = static_cast<int>(r.job.topology);
    for (const Placement& pl : r.replicas) {
      if (level > 0) {
        ASSERT_EQ(c.node_domain[level][pl.node], c.node_domain[level][r.replicas[0].node])
            << r.job.name << ": replicas span two domains of its required level";
      }
      ASSERT_TRUE(node_allowed(c, pl.node, r.job)) << r.job.name;
      apply_placement(free[pl.node], pl, r.job.request, -1);
    }
  }
  for (size_t n = 0; n < c.nodes.size(); ++n) {
    ASSERT_GE(free[n].cpu_milli, 0);
    ASSERT_GE(free[n].memory_mib, 0);
    for (int g = 0; g < kMaxGpusPerNode; ++g) {
      ASSERT_GE(free[n].gpu[g], 0) << "node " << n << " GPU " << g << " over-allocated";
      ASSERT_EQ(free[n].gpu[g], s.free[n].gpu[g]) << "free GPU bookkeeping drifted";
    }
    ASSERT_EQ(free[n].cpu_milli, s.free[n].cpu_milli);
  }
  QuotaBook book(c, s.running);
  for (size_t q = 0; q < c.queues.size(); ++q) {
    auto it = c.queues[q].quota.find("gpu");
    if (it == c.queues[q].quota.end()) continue;
    int64_t limit = it->second.nominal;
    if (c.queue_cohort[q] != kNone) limit = it->second.borrowing_limit < 0 ? INT64_MAX : limit + it->second.borrowing_limit;
    ASSERT_LE(book.usage(static_cast<int>(q), "gpu"), limit) << "queue " << c.queues[q].name << " over its quota";
  }
  for (const Decision& d : p.decisions) {
    if (d.kind == DecisionKind::kAdmit) {
      ASSERT_GE(static_cast<int>(d.placements.size()), 1);
    }
  }
}

TEST(ClusterInvariants, RandomClustersAndWorkloads) {
  const char* policies[] = {"koi", "fifo", "best-fit", "fgd", "priority", "drf", "backfill"};
  for (int run = 0; run < runs(); ++run) {
    Rng rng(1000 + run);
    Cluster c = random_cluster(rng);
    std::vector<Job> jobs = random_jobs(rng, c);
    SimOptions o;
    o.policy = *policy_by_name(policies[run % 7]);
    o.on_step = check_state;
    o.mode = run % 5 == 0 ? SimMode::kFill : SimMode::kReplay;
    o.seed = run;
    Result<SimResult> a = simulate(c, jobs, o);
    ASSERT_TRUE(a.ok()) << a.status().message();
    if (HasFatalFailure()) FAIL() << "run " << run << " policy " << policies[run % 7];
    bool quotas = false;
    for (const QueueSpec& q : c.queues) quotas = quotas || !q.quota.empty();
    // Stability: at every instant the plans settle (what one plan decides, the next does not
    // undo; the control plane plans every round).
    EXPECT_EQ(a->unstable_instants, 0) << "run " << run << " policy " << policies[run % 7] << ": a preemption cycle";
    if (o.mode == SimMode::kReplay && !quotas) {
      EXPECT_EQ(a->unfinished, 0) << "run " << run << ": without quotas every runnable job finishes";
    }
    o.on_step = nullptr;
    Result<SimResult> b = simulate(c, jobs, o);
    ASSERT_EQ(sim_json(*a), sim_json(*b)) << "run " << run << " is not deterministic";
  }
}

}  // namespace
}  // namespace koi::cluster
