// Trace readers: the Alibaba 2023 GPU cluster trace (openb, as published with the FGD paper)
// and Koi's own job CSV. Both yield WorkSpecs (spec.h) that bind to a Cluster.
//
// Alibaba node list: sn,cpu_milli,memory_mib,gpu,model -> one NodeSpec per row.
// Alibaba pod list: name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
//   creation_time,deletion_time,scheduled_time]. A pod is a one-replica job submitted at
//   creation_time that runs deletion_time - scheduled_time seconds; its queue is its QoS class
//   (LS and Guaranteed: priority 2, not preemptible; Burstable: 1; BE: 0).
//   Rows that cannot be replayed (never scheduled, deleted before scheduled, malformed) are
//   skipped and counted by reason. Lists without the time columns (multigpu50) load with
//   has_times = false: fine for the saturation fill, not for an arrival-time replay.
// Koi job CSV: name,submit_time,duration,queue,priority,min_replicas,max_replicas,gpus,
//   gpu_milli,cpu_milli,memory_mib,gpu_types,topology,preemptible
//   (gpu_types separated by '|', topology one of none|nvlinkDomain|leafSwitch|spine).
// Errors name the file and line.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/spec.h"
#include "cluster/types.h"

namespace koi::cluster {

struct Trace {
  std::vector<WorkSpec> work;
  int rows = 0;
  int skipped = 0;
  std::map<std::string, int> skipped_by_reason;
  bool has_times = true;
};

Result<std::vector<NodeSpec>> read_alibaba_nodes(const std::string& path);
// Reads an Alibaba pod list or a Koi job CSV, told apart by the header line.
Result<Trace> read_trace(const std::string& path);
// The same from text already in memory; `origin` names it in errors.
Result<Trace> parse_trace(const std::string& text, const std::string& origin);

}  // namespace koi::cluster
