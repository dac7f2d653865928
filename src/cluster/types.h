// The cluster object model as plain data: what a Node offers, what a Queue is entitled to,
// what a Job asks for, and where running work sits. The scheduler (scheduler.h) is a pure
// function over these types; specs (spec.h) and traces (trace.h) build them from files.
//
// Units: CPU in milli-cores, memory in MiB, GPU in "units" per device: a plain GPU has
// kGpuMilli (1000) units so that fractional requests (the Alibaba trace's gpu_milli) are exact
// integers; a MIG-enabled GPU has `mig_slices` units (7 on an A100/H100), one per slice.
// Types are values with no ownership subtleties; none is thread-safe to mutate concurrently.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace koi::cluster {

inline constexpr int kGpuMilli = 1000;
inline constexpr int kMaxGpusPerNode = 16;
inline constexpr int kNone = -1;  // "no id" for optional topology labels, queues, GPU types

// One replica's resource request.
//   gpus == 0:                          CPU-only.
//   gpus >= 1, gpu_milli == kGpuMilli:  `gpus` whole devices.
//   gpus == 1, gpu_milli <  kGpuMilli:  a share of one device (GPU sharing), not on MIG GPUs.
//   gpus == 1, mig_slices > 0:          that many MIG slices of one device, on MIG GPUs only.
struct Request {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  int gpus = 0;
  int gpu_milli = kGpuMilli;
  int mig_slices = 0;

  bool fractional() const { return gpus == 1 && gpu_milli < kGpuMilli && mig_slices == 0; }
  // GPU milli counted against quotas and allocation rates (a MIG slice counts as 1/7 GPU).
  int64_t gpu_milli_total() const;
  bool operator==(const Request&) const = default;
};

// Topology levels, innermost first. A job may require all replicas to share one domain.
enum class Topology { kNone = 0, kNvlink, kLeaf, kSpine };

struct NodeSpec {
  std::string name;
  std::string gpu_type;   // "" for CPU-only nodes
  int gpu_count = 0;
  int64_t gpu_memory_mib = 0;
  int mig_slices = 0;     // 0: GPUs are not MIG-partitioned
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::string nvlink_domain, leaf_switch, spine;  // "" when unknown
  std::string state;  // "" when it takes work; else the executor's word ("down", "drain")
};

// Quota of one queue for one resource ("cpu", "memory", "gpu" or "gpu/<TYPE>").
// Absent limits are unlimited; a queue without a cohort cannot borrow.
struct Quota {
  int64_t nominal = 0;
  int64_t borrowing_limit = -1;  // -1: may borrow anything the cohort lends
  int64_t lending_limit = -1;    // -1: lends all of its unused nominal quota
};

struct QueueSpec {
  std::string name;
  std::string tenant;
  std::string cohort;  // "" = none
  int priority = 0;    // higher queues are served first
  std::map<std::string, Quota> quota;  // no entry for a resource: unlimited
};

struct Job {
  int id = 0;  // unique, dense enough to index; assigned by whoever builds the workload
  std::string name;
  int queue = 0;  // index into Cluster::queues
  int priority = 0;
  Request request;  // per replica
  int min_replicas = 1;  // the gang: all of these start together or none does
  int max_replicas = 1;  // > min_replicas: elastic, grows into idle capacity, shrinks first
  Topology topology = Topology::kNone;  // required common domain of all replicas
  bool preemptible = true;
  double submit_time = 0;
  double duration = -1;  // seconds of work; < 0 unknown (never ends, never backfills)
  std::vector<int> gpu_types;  // allowed type ids (Cluster::gpu_types); empty: any
  std::string preempted_by;    // last job that evicted this one, for explanations
};

// Where one replica runs: `units` on each GPU of `gpu_mask` on node `node`.
struct Placement {
  int node = 0;
  uint32_t gpu_mask = 0;
  int units = 0;
  bool operator==(const Placement&) const = default;
};

struct RunningJob {
  Job job;
  double start_time = 0;
  std::vector<Placement> replicas;
};

// Free resources of one node; the only per-node state the scheduler mutates.
struct NodeFree {
  int64_t cpu_milli = 0;
  int64_t memory_mib = 0;
  std::array<int32_t, kMaxGpusPerNode> gpu{};  // free units per device
};

// The static cluster: nodes, interned labels and queues. Built once, shared read-only.
struct Cluster {
  std::vector<NodeSpec> nodes;
  std::vector<int> node_gpu_type;   // type id per node, kNone for CPU-only
  std::vector<int> node_capacity;   // units per GPU device of each node
  std::array<std::vector<int>, 4> node_domain;  // per Topology level: domain id per node
  std::array<int, 4> domain_count{};
  std::array<std::vector<std::vector<int>>, 4> domain_nodes;  // per level: nodes of each domain
  std::vector<std::string> gpu_types;
  std::vector<QueueSpec> queues;
  std::map<std::string, int> cohort_ids;
  std::vector<int> queue_cohort;    // cohort id per queue, kNone without one

  int gpu_type_id(const std::string& name) const;  // kNone if no node has it
  int queue_id(const std::string& name) const;     // kNone if unknown
  NodeFree capacity(int node) const;
  int64_t total_gpu_milli() const;
};

// Builds the interned indices of a Cluster from its node and queue specs. A cluster always
// has at least one queue: "default" (unlimited) is added when none is given.
Cluster make_cluster(std::vector<NodeSpec> nodes, std::vector<QueueSpec> queues);

// Live state: the free resources of every node and the work running on them.
struct ClusterState {
  const Cluster* cluster = nullptr;
  std::vector<NodeFree> free;
  std::vector<RunningJob> running;
};

ClusterState make_empty_state(const Cluster& cluster);

}  // namespace koi::cluster
