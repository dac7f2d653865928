// Specs: the cluster objects written as YAML documents in Kubernetes' style
// (apiVersion: koi/v1, kind, metadata.name, spec), several per file separated by "---".
//
//   kind: Node        spec: {gpus: {type, count, memoryMiB, migSlices}, cpu, memoryMiB,
//                            topology: {nvlinkDomain, leafSwitch, spine}, replicas}
//                     (replicas: N expands to N nodes named <name>-0 .. <name>-(N-1))
//   kind: Queue       spec: {tenant, cohort, priority,
//                            quota: {<resource>: {nominal, borrowingLimit, lendingLimit}}}
//                     resources: cpu (cores), memory (MiB), gpu and gpu/<TYPE> (GPUs)
//   kind: Job         spec: {queue, priority, replicas | minReplicas + maxReplicas,
//                            resources: {gpus, gpuFraction, migSlices, cpu, memoryMiB},
//                            gpuTypes: [..], topology: none|nvlinkDomain|leafSwitch|spine,
//                            preemptible, submitTime, duration}
//   kind: Deployment  spec: {queue, priority, replicas, resources, gpuTypes, preemptible}
//                     (inference replicas: start independently, run until removed)
//
// Parsing never throws: every error is a Status naming the file, document and field.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cluster/types.h"

namespace koi::cluster {

// A Job or Deployment before it is bound to a Cluster (queue and GPU types by name).
struct WorkSpec {
  Job job;  // id, queue and gpu_types are filled in by bind_work()
  std::string queue = "default";
  std::vector<std::string> gpu_types;
};

struct Specs {
  std::vector<NodeSpec> nodes;
  std::vector<QueueSpec> queues;
  std::vector<WorkSpec> work;
};

// `origin` names the text in error messages (usually the file path).
Result<Specs> parse_specs(std::string_view yaml, const std::string& origin);
Result<Specs> load_specs(const std::string& path);

// Resolves queue and GPU type names against a cluster and numbers the jobs 0..n-1. A GPU type
// no node has stays in the job as an impossible constraint (the job then explains itself).
Result<std::vector<Job>> bind_work(const Cluster& cluster, const std::vector<WorkSpec>& work);

}  // namespace koi::cluster
