#include "cluster/spec.h"

#include <gtest/gtest.h>

#include "cluster/trace.h"

namespace koi::cluster {
namespace {

constexpr const char* kSpecs = R"(apiVersion: koi/v1
kind: Node
metadata: {name: hgx}
spec:
  gpus: {type: H100, count: 8, memoryMiB: 81920, migSlices: 7}
  cpu: 96
  memoryMiB: 1048576
  topology: {nvlinkDomain: nvl-0, leafSwitch: leaf-0, spine: spine-0}
  replicas: 2
---
kind: Queue
metadata: {name: research}
spec:
  cohort: all
  priority: 1
  quota:
    gpu: {nominal: 8, borrowingLimit: 4}
    memory: {nominal: 4096}
---
kind: Job
metadata: {name: train}
spec:
  queue: research
  minReplicas: 2
  maxReplicas: 4
  resources: {gpus: 4, cpu: 8, memoryMiB: 1024}
  gpuTypes: [H100, B200]
  topology: leafSwitch
  duration: 3600
---
kind: Deployment
metadata: {name: chat}
spec:
  queue: research
  replicas: 3
  resources: {gpuFraction: 0.25, cpu: 2}
)";

TEST(ClusterSpec, ParsesEveryKind) {
  Result<Specs> s = parse_specs(kSpecs, "cluster.yaml");
  ASSERT_TRUE(s.ok()) << s.status().message();
  ASSERT_EQ(s->nodes.size(), 2u);
  EXPECT_EQ(s->nodes[1].name, "hgx-1");
  EXPECT_EQ(s->nodes[0].cpu_milli, 96000);
  EXPECT_EQ(s->nodes[0].mig_slices, 7);
  EXPECT_EQ(s->nodes[0].leaf_switch, "leaf-0");
  ASSERT_EQ(s->queues.size(), 1u);
  EXPECT_EQ(s->queues[0].quota.at("gpu").nominal, 8000);
  EXPECT_EQ(s->queues[0].quota.at("gpu").borrowing_limit, 4000);
  EXPECT_EQ(s->queues[0].quota.at("memory").nominal, 4096);
  Cluster c = make_cluster(s->nodes, s->queues);
  Result<std::vector<Job>> jobs = bind_work(c, s->work);
  ASSERT_TRUE(jobs.ok());
  const Job& train = (*jobs)[0];
  EXPECT_EQ(train.min_replicas, 2);
  EXPECT_EQ(train.max_replicas, 4);
  EXPECT_EQ(train.topology, Topology::kLeaf);
  EXPECT_EQ(train.gpu_types, (std::vector<int>{0, kNone}));  // B200: no such node
  const Job& chat = (*jobs)[1];
  EXPECT_EQ(chat.request.gpu_milli, 250);
  EXPECT_EQ(chat.max_replicas, 3);
  EXPECT_FALSE(chat.preemptible);
  EXPECT_LT(chat.duration, 0);
}

TEST(ClusterSpec, ErrorsNameTheFileAndField) {
  EXPECT_EQ(parse_specs("kind: Node\nmetadata: {name: a}\nspec: {cpu: 4}\n", "c.yaml").status().message(),
            "c.yaml: Node 'a' spec.memoryMiB is required");
  EXPECT_EQ(parse_specs("kind: Pod\nmetadata: {name: a}\n", "c.yaml").status().message(),
            "c.yaml: Pod 'a': unknown kind 'Pod'; use Node, Queue, Job or Deployment");
  EXPECT_EQ(parse_specs("kind: Job\nmetadata: {name: a}\nspec: {topology: rack}\n", "c.yaml").status().message(),
            "c.yaml: Job 'a' spec.topology: 'rack' is not one of none, nvlinkDomain, leafSwitch, spine");
  EXPECT_EQ(parse_specs("kind: Job\nmetadata: {name: a}\nspec: {priority: high}\n", "c.yaml").status().message(),
            "c.yaml: Job 'a' spec.priority: 'high' is not a valid value");
  EXPECT_EQ(parse_specs("kind: [\n", "c.yaml").status().code(), StatusCode::kInvalidArgument);
  Cluster c = make_cluster({}, {});
  WorkSpec w;
  w.job.name = "x";
  w.queue = "nope";
  EXPECT_EQ(bind_work(c, {w}).status().message(),
            "job 'x' names queue 'nope', which is not defined; add a Queue with that name");
}

TEST(ClusterTrace, AlibabaRowsAreSkippedWithReasons) {
  std::string csv =
      "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
      "p0,12000,16384,1,460,,LS,Running,0,100,10\n"
      "p1,6000,12288,8,1000,V100M16|V100M32,BE,Failed,5,50,\n"
      "p2,6000,12288,2,1000,,Burstable,Running,5,50,60\n"
      "p3,6000,x,2,1000,,BE,Running,5,50,6\n"
      "p4,6000,10,2\n"
      "p5,4000,10,2,1000,P100,BE,Succeeded,7,20,8\n";
  Result<Trace> t = parse_trace(csv, "pods.csv");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->rows, 6);
  EXPECT_EQ(t->skipped, 4);
  EXPECT_EQ(t->skipped_by_reason, (std::map<std::string, int>{{"deleted before scheduled", 1},
                                                              {"malformed resource field", 1},
                                                              {"never scheduled (no scheduled_time)", 1},
                                                              {"wrong number of fields", 1}}));
  ASSERT_EQ(t->work.size(), 2u);
  EXPECT_EQ(t->work[0].job.request.gpu_milli, 460);
  EXPECT_EQ(t->work[0].job.duration, 90);
  EXPECT_EQ(t->work[0].queue, "LS");
  EXPECT_FALSE(t->work[0].job.preemptible);
  EXPECT_EQ(t->work[1].gpu_types, (std::vector<std::string>{"P100"}));
  EXPECT_EQ(t->work[1].job.duration, 12);
}

TEST(ClusterTrace, KoiCsvErrorsNameTheLine) {
  std::string header =
      "name,submit_time,duration,queue,priority,min_replicas,max_replicas,gpus,gpu_milli,cpu_milli,memory_mib,"
      "gpu_types,topology,preemptible\n";
  Result<Trace> ok = parse_trace(header + "a,0,10,q,1,2,4,8,1000,1000,10,H100|A100,leafSwitch,true\n", "jobs.csv");
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(ok->work[0].job.topology, Topology::kLeaf);
  EXPECT_EQ(ok->work[0].job.max_replicas, 4);
  EXPECT_EQ(parse_trace(header + "a,0,10,q,1,3,2,8,1000,1000,10,,none,true\n", "jobs.csv").status().message(),
            "jobs.csv:2: need 1 <= min_replicas <= max_replicas; see `koi sim --help` for the job CSV format");
  EXPECT_EQ(parse_trace("foo,bar\n1,2\n", "x.csv").status().message(),
            "x.csv: unknown trace format; expected an Alibaba pod list (name,cpu_milli,memory_mib,num_gpu,gpu_milli,...) "
            "or a Koi job CSV (name,submit_time,duration,...)");
}

TEST(ClusterTrace, ReadsThePublishedAlibabaTrace) {
  std::string dir = std::string(KOI_SHARED_DIR) + "/traces/cluster/";
  Result<std::vector<NodeSpec>> nodes = read_alibaba_nodes(dir + "alibaba2023_openb_node_list_gpu_node.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().message();
  EXPECT_EQ(nodes->size(), 1213u);
  Result<Trace> pods = read_trace(dir + "alibaba2023_openb_pod_list_default.csv");
  ASSERT_TRUE(pods.ok());
  EXPECT_EQ(pods->rows, 8152);
  EXPECT_EQ(pods->skipped, 897);  // the Pending pods: never scheduled, no run time
  Result<Trace> multi = read_trace(dir + "alibaba2023_openb_pod_list_multigpu50.csv");
  ASSERT_TRUE(multi.ok());
  EXPECT_FALSE(multi->has_times);
  EXPECT_EQ(multi->work.size(), 9061u);
}

}  // namespace
}  // namespace koi::cluster
