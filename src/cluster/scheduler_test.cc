#include "cluster/scheduler.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "base/random.h"
#include "cluster/placement.h"
#include "cluster/simulator.h"

namespace koi::cluster {
namespace {

NodeSpec gpu_node(const std::string& name, int gpus, const std::string& leaf = "", const std::string& nvlink = "") {
  NodeSpec n;
  n.name = name;
  n.gpu_type = "H100";
  n.gpu_count = gpus;
  n.cpu_milli = 64000;
  n.memory_mib = 1 << 20;
  n.leaf_switch = leaf;
  n.nvlink_domain = nvlink;
  return n;
}

Job job(int id, int gpus, int replicas = 1, int priority = 0, double submit = 0, double duration = 100) {
  Job j;
  j.id = id;
  j.name = "j" + std::to_string(id);
  j.request.gpus = gpus;
  j.request.cpu_milli = 1000;
  j.min_replicas = j.max_replicas = replicas;
  j.priority = priority;
  j.submit_time = submit;
  j.duration = duration;
  return j;
}

Policy policy(const char* name) { return *policy_by_name(name); }

// Admits the plan's decisions into the state (as an executor would).
void apply_all(ClusterState& state, const Plan& p, const std::vector<Job>& pending, double now) {
  for (const Decision& d : p.decisions) {
    const Job* j = nullptr;
    for (const Job& x : pending) {
      if (x.id == d.job_id) j = &x;
    }
    apply_decision(state, d, j, now);
  }
}

TEST(ClusterScheduler, GangIsAllOrNothing) {
  Cluster c = make_cluster({gpu_node("a", 4), gpu_node("b", 4)}, {});
  ClusterState s = make_empty_state(c);
  std::vector<Job> pending = {job(1, 3, 3), job(2, 2, 2)};
  Plan p = plan(s, pending, 0, policy("best-fit"));
  // Two 3-GPU replicas fit (one per node), the third does not: nothing of job 1 is placed.
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].job_id, 2);
  ASSERT_EQ(p.waiting.size(), 1u);
  EXPECT_EQ(p.waiting[0].reason, Reason::kGang);
  EXPECT_EQ(p.waiting[0].message, "gang of 3 replicas (1 CPU, 0 MiB, 3 GPU each) does not fit: only 2 fit now");
}

TEST(ClusterScheduler, BorrowThenReclaimByPreemption) {
  QueueSpec a, b;
  a.name = "a";
  b.name = "b";
  a.cohort = b.cohort = "research";
  a.quota["gpu"] = {.nominal = 4000};
  b.quota["gpu"] = {.nominal = 4000};
  Cluster c = make_cluster({gpu_node("n0", 4), gpu_node("n1", 4)}, {a, b});
  ClusterState s = make_empty_state(c);
  std::vector<Job> first;
  for (int i = 0; i < 8; ++i) {
    first.push_back(job(i, 1, 1, 0, i));
    first.back().queue = 0;
  }
  Plan p1 = plan(s, first, 10, policy("koi"));
  EXPECT_EQ(p1.decisions.size(), 8u);  // queue a borrows b's idle 4 GPUs
  for (size_t i = 0; i < first.size(); ++i) apply_decision(s, p1.decisions[i], &first[p1.decisions[i].job_id], 10.0 + i);
  std::vector<Job> second = {job(20, 1, 1, 0, 20), job(21, 1, 1, 0, 21)};
  for (Job& j : second) j.queue = 1;
  Plan p2 = plan(s, second, 30, policy("koi"));
  // b is within its nominal quota: it reclaims two GPUs from a's borrowed jobs, the two
  // that lose the least work (the last started: j7 and j6), then both its jobs start.
  ASSERT_EQ(p2.decisions.size(), 4u);
  EXPECT_EQ(p2.decisions[0].kind, DecisionKind::kPreempt);
  EXPECT_EQ(p2.decisions[0].job_id, 7);
  EXPECT_EQ(p2.decisions[0].by_job, 20);
  EXPECT_EQ(p2.decisions[1].kind, DecisionKind::kAdmit);
  EXPECT_EQ(p2.decisions[1].job_id, 20);
  EXPECT_EQ(p2.decisions[2].kind, DecisionKind::kPreempt);
  EXPECT_EQ(p2.decisions[2].job_id, 6);
  EXPECT_EQ(p2.decisions[3].job_id, 21);
  // Without a cohort to borrow from, a's ninth job waits on quota and says so.
  std::vector<Job> third = {job(30, 1, 1, 0, 40)};
  third[0].queue = 0;
  apply_all(s, p2, second, 30);
  Plan p3 = plan(s, third, 40, policy("koi"));
  ASSERT_EQ(p3.waiting.size(), 1u);
  EXPECT_EQ(p3.waiting[0].reason, Reason::kQuota);
  EXPECT_EQ(p3.waiting[0].message, "queue 'a' would borrow 3 GPU gpu but cohort 'research' has only 2 GPU unused to lend");
}

TEST(ClusterScheduler, PriorityPreemptionPicksCheapestVictims) {
  Cluster c = make_cluster({gpu_node("n0", 4)}, {});
  ClusterState s = make_empty_state(c);
  // Four one-GPU jobs: priorities 1, 0, 0, 0 started at t=0, 10, 50, 90.
  std::vector<Job> running = {job(1, 1, 1, 1), job(2, 1, 1, 0), job(3, 1, 1, 0), job(4, 1, 1, 0)};
  double starts[] = {0, 10, 50, 90};
  for (int i = 0; i < 4; ++i) {
    Plan p = plan(s, {running[i]}, starts[i], policy("priority"));
    apply_all(s, p, {running[i]}, starts[i]);
  }
  std::vector<Job> urgent = {job(9, 2, 1, 5, 100)};
  Plan p = plan(s, urgent, 100, policy("priority"));
  // The cheapest two: lowest priority, least work lost (j4 ran 10 s, j3 ran 50 s).
  ASSERT_EQ(p.decisions.size(), 3u);
  EXPECT_EQ(p.decisions[0].kind, DecisionKind::kPreempt);
  EXPECT_EQ(p.decisions[0].job_id, 3);
  EXPECT_EQ(p.decisions[1].job_id, 4);
  EXPECT_EQ(p.decisions[2].kind, DecisionKind::kAdmit);
  EXPECT_EQ(p.decisions[2].job_id, 9);
  // Non-preemptible work is never a victim.
  for (RunningJob& r : s.running) r.job.preemptible = false;
  Plan none = plan(s, urgent, 100, policy("priority"));
  EXPECT_TRUE(none.decisions.empty());
  EXPECT_EQ(none.waiting[0].message, "no node has room for one replica (1 CPU, 0 MiB, 2 GPU)");
}

TEST(ClusterScheduler, TopologyPlacementOnTwoSwitches) {
  // leaf-0: n0, n1; leaf-1: n2, n3. n0 has one GPU busy, so only leaf-1 holds 2 x 4 GPUs.
  Cluster c = make_cluster({gpu_node("n0", 4, "leaf-0"), gpu_node("n1", 4, "leaf-0"), gpu_node("n2", 4, "leaf-1"),
                            gpu_node("n3", 4, "leaf-1")},
                           {});
  ClusterState s = make_empty_state(c);
  Job small = job(1, 1);
  Plan p0 = plan(s, {small}, 0, policy("fifo"));
  apply_all(s, p0, {small}, 0);
  ASSERT_EQ(s.running[0].replicas[0].node, 0);
  Job gang = job(2, 4, 2);
  gang.topology = Topology::kLeaf;
  Plan p = plan(s, {gang}, 0, policy("best-fit"));
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].placements[0].node, 2);
  EXPECT_EQ(p.decisions[0].placements[1].node, 3);
  // Without the requirement the gang still spans one leaf switch only (preference).
  gang.topology = Topology::kNone;
  gang.request.gpus = 2;
  gang.min_replicas = gang.max_replicas = 4;
  Plan q = plan(s, {gang}, 0, policy("best-fit"));
  ASSERT_EQ(q.decisions.size(), 1u);
  for (const Placement& pl : q.decisions[0].placements) EXPECT_GE(pl.node, 2);
  // Three 4-GPU replicas fit the cluster but no leaf: the reason is topology.
  gang.topology = Topology::kLeaf;
  gang.request.gpus = 4;
  gang.min_replicas = gang.max_replicas = 3;
  Plan r = plan(s, {gang}, 0, policy("best-fit"));
  ASSERT_EQ(r.waiting.size(), 1u);
  EXPECT_EQ(r.waiting[0].reason, Reason::kTopology);
  EXPECT_EQ(r.waiting[0].message, "3 replicas fit in the cluster but no single leaf switch has room for all of them");
}

TEST(ClusterScheduler, BackfillNeverDelaysHeadJob) {
  Cluster c = make_cluster({gpu_node("n0", 4)}, {});
  // t=0: A takes 2 GPUs for 10 s. t=1: head H needs 4 GPUs (must wait for A, reserved at t=10).
  // B (2 GPUs, 5 s) ends before 10: backfills. C (2 GPUs, 20 s) would delay H: waits.
  std::vector<Job> jobs = {job(0, 2, 1, 0, 0, 10), job(1, 4, 1, 0, 1, 10), job(2, 2, 1, 0, 2, 20), job(3, 2, 1, 0, 3, 5)};
  SimOptions o;
  o.policy = policy("backfill");
  std::vector<std::string> starts;
  ClusterState snapshot;
  o.on_step = [&](const ClusterState& s, const Plan& p) {
    for (const Decision& d : p.decisions) {
      for (const RunningJob& r : s.running) {
        if (r.job.id == d.job_id) starts.push_back(fmt::format("{}@{:g}", r.job.name, r.start_time));
      }
    }
    for (const Explanation& w : p.waiting) {
      if (w.job_id == 2 && w.reason == Reason::kReserved) {
        EXPECT_EQ(w.message, "starting now would delay reserved job 'j1' (expected to start at t=10)");
      }
    }
  };
  Result<SimResult> r = simulate(c, jobs, o);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(starts, (std::vector<std::string>{"j0@0", "j3@3", "j1@10", "j2@20"}));
  // Strict FIFO would have started j3 only after j1.
  starts.clear();
  o.policy = policy("fifo");
  ASSERT_TRUE(simulate(c, jobs, o).ok());
  EXPECT_EQ(starts, (std::vector<std::string>{"j0@0", "j1@10", "j2@20", "j3@20"}));
}

// The cache's scores equal node_fragmentation() bit for bit on random states, plain, MIG and
// shared requests alike, and stay equal as the states change under it.
TEST(FragmentationCache, EqualsTheDirectSumOnRandomStates) {
  NodeSpec mig = gpu_node("mig", 4);
  mig.mig_slices = 7;
  Cluster c = make_cluster({gpu_node("n0", 8), gpu_node("n1", 2), mig}, {});
  std::vector<WorkloadClass> workload;
  for (int gpus : {1, 2, 4}) workload.push_back({Request{4000, 8192, gpus}, 0.2});
  workload.push_back({Request{1000, 2048, 1, 250}, 0.15});
  workload.push_back({Request{1000, 2048, 1, 500}, 0.15});
  workload.push_back({Request{2000, 4096, 1, kGpuMilli, 3}, 0.1});
  workload.push_back({Request{1000, 1024, 0}, 0.1});  // CPU-only: strands nothing
  FragmentationCache cache(c, workload);
  Rng rng(3);
  int compared = 0;
  for (int round = 0; round < 3000; ++round) {
    const int node = static_cast<int>(rng.below(3));
    NodeFree free = c.capacity(node);
    for (int g = 0; g < c.nodes[node].gpu_count; ++g) {
      free.gpu[g] = static_cast<int32_t>(rng.below(static_cast<uint64_t>(c.node_capacity[node]) + 1));
    }
    free.cpu_milli = static_cast<int64_t>(rng.below(8000));
    free.memory_mib = static_cast<int64_t>(rng.below(16384));
    ASSERT_EQ(cache.before(node, free), node_fragmentation(c, node, free, workload));
    const Request& r = workload[rng.below(workload.size())].request;
    std::optional<Placement> p = fit_on_node(c, node, free, r);
    if (!p) continue;
    NodeFree after = free;
    apply_placement(after, *p, r, -1);
    ASSERT_EQ(cache.after(node, free, *p, r), node_fragmentation(c, node, after, workload)) << "round " << round;
    ASSERT_EQ(cache.after(node, free, *p, r), node_fragmentation(c, node, after, workload));  // remembered
    ++compared;
  }
  EXPECT_GT(compared, 500);
}

TEST(ClusterScheduler, FractionalGpuPackingAvoidsFragmentation) {
  Cluster c = make_cluster({gpu_node("n0", 2), gpu_node("n1", 2)}, {});
  ClusterState s = make_empty_state(c);
  Job half = job(1, 1);
  half.request.gpu_milli = 500;
  // n1 already holds a 0.5 GPU task: the next 0.5 GPU task shares that device (FGD and
  // best-fit both), leaving n0's two whole GPUs for whole-GPU work.
  s.free[1].gpu[0] = 500;
  Policy fgd = policy("fgd");
  fgd.workload = {{half.request, 0.5}, {job(0, 2).request, 0.5}};
  Plan p = plan(s, {half}, 0, fgd);
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].placements[0], (Placement{.node = 1, .gpu_mask = 1u, .units = 500}));
  // First fit would split n0's first GPU instead.
  Plan ff = plan(s, {half}, 0, policy("fifo"));
  EXPECT_EQ(ff.decisions[0].placements[0], (Placement{.node = 0, .gpu_mask = 1u, .units = 500}));
  // A 0.7 GPU task cannot share a device with 0.5 free: FGD prefers n1's whole free GPU, so n0
  // stays able to take a 2-GPU task.
  Job big = half;
  big.request.gpu_milli = 700;
  Plan q = plan(s, {big}, 0, fgd);
  EXPECT_EQ(q.decisions[0].placements[0], (Placement{.node = 1, .gpu_mask = 2u, .units = 700}));
  // n1 (0.5 + 1 GPU free): the 0.5 class strands nothing, the 2-GPU class cannot run (all 1.5 stranded).
  EXPECT_DOUBLE_EQ(node_fragmentation(c, 1, s.free[1], fgd.workload), 0.5 * 0 + 0.5 * 1500);
}

TEST(ClusterScheduler, MigSlicesOnlyOnMigGpus) {
  NodeSpec mig = gpu_node("mig", 1);
  mig.mig_slices = 7;
  Cluster c = make_cluster({gpu_node("plain", 1), mig}, {});
  ClusterState s = make_empty_state(c);
  Job j = job(1, 1, 3);
  j.request.mig_slices = 2;
  Plan p = plan(s, {j}, 0, policy("best-fit"));
  ASSERT_EQ(p.decisions.size(), 1u);
  for (const Placement& pl : p.decisions[0].placements) EXPECT_EQ(pl, (Placement{.node = 1, .gpu_mask = 1u, .units = 2}));
  j.min_replicas = j.max_replicas = 4;  // 8 slices > 7
  EXPECT_EQ(plan(s, {j}, 0, policy("best-fit")).waiting[0].reason, Reason::kGang);
}

TEST(ClusterScheduler, ElasticShrinkAndGrow) {
  Cluster c = make_cluster({gpu_node("n0", 4)}, {});
  ClusterState s = make_empty_state(c);
  Job elastic = job(1, 1);
  elastic.min_replicas = 1;
  elastic.max_replicas = 4;
  Plan p = plan(s, {elastic}, 0, policy("koi"));
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].placements.size(), 4u);  // grows into the idle GPUs at admission
  apply_all(s, p, {elastic}, 0);
  // A rigid job of equal priority needs 2 GPUs: the elastic job gives back two replicas.
  Job rigid = job(2, 2);
  Plan q = plan(s, {rigid}, 5, policy("koi"));
  ASSERT_EQ(q.decisions.size(), 2u);
  EXPECT_EQ(q.decisions[0].kind, DecisionKind::kShrink);
  EXPECT_EQ(q.decisions[0].placements.size(), 2u);
  EXPECT_EQ(q.decisions[1].job_id, 2);
  apply_all(s, q, {rigid}, 5);
  EXPECT_EQ(s.running[0].replicas.size(), 2u);
  // When the rigid job ends, the elastic job grows back to four.
  apply_decision(s, {DecisionKind::kPreempt, 2, {}, kNone}, nullptr, 10);
  Plan g = plan(s, {}, 10, policy("koi"));
  ASSERT_EQ(g.decisions.size(), 1u);
  EXPECT_EQ(g.decisions[0].kind, DecisionKind::kGrow);
  EXPECT_EQ(g.decisions[0].placements.size(), 2u);
}

TEST(ClusterScheduler, DrfServesTheQueueWithTheSmallestShare) {
  QueueSpec a, b;
  a.name = "a";
  b.name = "b";
  Cluster c = make_cluster({gpu_node("n0", 4)}, {a, b});
  ClusterState s = make_empty_state(c);
  Job running = job(0, 2);
  apply_decision(s, plan(s, {running}, 0, policy("drf")).decisions[0], &running, 0);
  std::vector<Job> pending = {job(1, 2, 1, 0, 1), job(2, 2, 1, 0, 2)};
  pending[1].queue = 1;
  Plan p = plan(s, pending, 3, policy("drf"));
  ASSERT_EQ(p.decisions.size(), 1u);
  EXPECT_EQ(p.decisions[0].job_id, 2);  // queue b has no share yet, a already holds half
}

TEST(ClusterScheduler, ExplainsGpuTypeAndPreemption) {
  Cluster c = make_cluster({gpu_node("n0", 1)}, {});
  ClusterState s = make_empty_state(c);
  Job j = job(1, 1);
  j.gpu_types = {kNone};
  j.preempted_by = "j7";
  Plan p = plan(s, {j}, 0, policy("koi"));
  ASSERT_EQ(p.waiting.size(), 1u);
  EXPECT_EQ(p.waiting[0].reason, Reason::kNoGpuType);
  EXPECT_EQ(p.waiting[0].message,
            "no node of an allowed GPU type can hold one replica (1 CPU, 0 MiB, 1 GPU) (last preempted by job 'j7')");
}

TEST(ClusterScheduler, UnknownPolicyIsAnError) {
  EXPECT_EQ(policy_by_name("lottery").status().message(),
            "unknown policy 'lottery'; use one of: koi, fifo, best-fit, fgd, priority, drf, backfill");
}

}  // namespace
}  // namespace koi::cluster
