#include "cluster/control_plane/slurm_executor.h"

#include <gtest/gtest.h>

#include "cluster/control_plane/config.h"

namespace koi::cluster {
namespace {

// `scontrol show node -o` and `scontrol show topology` of Slurm 22.05 (the test cluster of
// scripts/slurm_cluster.py, trimmed), with one node down and one drained.
constexpr const char* kNodes =
    "NodeName=h0 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=0.66 Gres=gpu:h100:2(S:0) "
    "NodeAddr=10.213.223.11 RealMemory=4096 AllocMem=0 State=MIXED Partitions=koi  Reason=(null)\n"
    "NodeName=h1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 Gres=gpu:h100:2 RealMemory=4096 "
    "State=DOWN+NOT_RESPONDING Partitions=koi Reason=Not responding [slurm@2026-12-01T20:43:37]\n"
    "NodeName=h2 CPUTot=8 Gres=gpu:2 RealMemory=8192 State=IDLE+DRAIN Partitions=koi,other Reason=koi test\n"
    "NodeName=c0 CPUTot=2 Gres=(null) RealMemory=1024 State=IDLE Partitions=koi\n";
constexpr const char* kTopology =
    "SwitchName=s0 Level=0 LinkSpeed=1 Nodes=h[0-1]\n"
    "SwitchName=s1 Level=0 LinkSpeed=1 Nodes=h2\n"
    "SwitchName=sp0 Level=1 LinkSpeed=1 Nodes=h[0-2] Switches=s[0-1]\n";

TEST(SlurmParse, NodesWithGresTopologyAndStates) {
  const std::vector<NodeSpec> nodes = parse_slurm_nodes(kNodes, kTopology);
  ASSERT_EQ(nodes.size(), 4u);
  EXPECT_EQ(nodes[0].name, "c0");  // by name
  EXPECT_EQ(nodes[0].gpu_count, 0);
  EXPECT_EQ(nodes[0].leaf_switch, "");
  const NodeSpec& h0 = nodes[1];
  EXPECT_EQ(h0.name, "h0");
  EXPECT_EQ(h0.cpu_milli, 4000);
  EXPECT_EQ(h0.memory_mib, 4096);
  EXPECT_EQ(h0.gpu_type, "H100");
  EXPECT_EQ(h0.gpu_count, 2);
  EXPECT_EQ(h0.leaf_switch, "s0");
  EXPECT_EQ(h0.spine, "sp0");
  EXPECT_EQ(h0.state, "");
  EXPECT_EQ(nodes[2].state, "down+not_responding");
  EXPECT_EQ(nodes[2].leaf_switch, "s0");
  EXPECT_EQ(nodes[3].state, "idle+drain");
  EXPECT_EQ(nodes[3].gpu_type, "GPU");  // untyped gres
  EXPECT_EQ(nodes[3].cpu_milli, 8000);
  EXPECT_EQ(nodes[3].leaf_switch, "s1");
}

// The load slurmd reports is the node's measured usage; a node without a figure has none.
TEST(SlurmParse, UsageIsTheReportedLoad) {
  const std::map<std::string, NodeUsage> usage =
      parse_slurm_usage(std::string(kNodes) + "NodeName=c1 CPUTot=2 CPULoad=N/A RealMemory=1024 State=DOWN\n", 7.5);
  ASSERT_EQ(usage.size(), 1u);
  const NodeUsage& h0 = usage.at("h0");
  EXPECT_EQ(h0.time, 7.5);
  EXPECT_EQ(h0.source, "scontrol");
  EXPECT_DOUBLE_EQ(*h0.load_average, 0.66);
  EXPECT_FALSE(h0.cpu_utilization.has_value());  // not measured: never a made-up figure
  EXPECT_EQ(h0.memory_used_bytes, -1);
  EXPECT_TRUE(h0.gpus.empty());
}

TEST(SlurmParse, RecordValuesMayHoldSpaces) {
  auto r = parse_slurm_record("JobId=12 JobState=NODE_FAIL Reason=koi test [root@x] ExitCode=0:9 WorkDir=/w/a b");
  EXPECT_EQ(r["JobId"], "12");
  EXPECT_EQ(r["JobState"], "NODE_FAIL");
  EXPECT_EQ(r["Reason"], "koi test [root@x]");
  EXPECT_EQ(r["ExitCode"], "0:9");
  EXPECT_EQ(r["WorkDir"], "/w/a b");
}

TEST(SlurmParse, HostLists) {
  EXPECT_EQ(expand_hostlist("h[0-2],x5"), (std::vector<std::string>{"h0", "h1", "h2", "x5"}));
  EXPECT_EQ(expand_hostlist("n[08-10,12]"), (std::vector<std::string>{"n08", "n09", "n10", "n12"}));
  EXPECT_EQ(expand_hostlist("a"), std::vector<std::string>{"a"});
  EXPECT_TRUE(expand_hostlist("").empty());
}

constexpr const char* kQueues = "queues:\n  - {name: q, tenant: t}\ntenants:\n  - {name: t, token: t-token-1}\n";

TEST(SlurmConfig, TheExecutorSectionIsCheckedByName) {
  auto c = parse_control_plane_config(
      std::string("executor: {type: slurm, partition: gpu, mpi: pmi2, commandTimeoutSeconds: 4}\n") + kQueues, "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->executor.type, "slurm");
  EXPECT_EQ(c->executor.partition, "gpu");
  EXPECT_EQ(c->executor.mpi, "pmi2");
  EXPECT_EQ(c->executor.command_timeout_seconds, 4);

  auto unknown = parse_control_plane_config(std::string("executor: {type: slurm, partitio: gpu}\n") + kQueues, "c.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("executor.partitio"), std::string::npos) << unknown.status().message();

  auto bad = parse_control_plane_config(std::string("executor: {type: k8s}\n") + kQueues, "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("executor.type: must be local or slurm"), std::string::npos)
      << bad.status().message();

  auto nodes = parse_control_plane_config(
      std::string("executor: {type: slurm}\nnodes:\n  - {name: n0, cpu: 1, memoryMiB: 1}\n") + kQueues, "c.yaml");
  ASSERT_FALSE(nodes.ok());
  EXPECT_NE(nodes.status().message().find("the slurm executor takes its nodes from Slurm"), std::string::npos)
      << nodes.status().message();

  auto local_key = parse_control_plane_config(
      std::string("executor: {type: local, partition: gpu}\nnodes:\n  - {name: n0, cpu: 1, memoryMiB: 1}\n") + kQueues,
      "c.yaml");
  ASSERT_FALSE(local_key.ok());
  EXPECT_NE(local_key.status().message().find("executor.partition"), std::string::npos) << local_key.status().message();
}

}  // namespace
}  // namespace koi::cluster
