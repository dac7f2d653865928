#include "cluster/types.h"

#include <algorithm>

namespace koi::cluster {

int64_t Request::gpu_milli_total() const {
  if (mig_slices > 0) return (static_cast<int64_t>(mig_slices) * kGpuMilli + 6) / 7;
  if (fractional()) return gpu_milli;
  return static_cast<int64_t>(gpus) * kGpuMilli;
}

int Cluster::gpu_type_id(const std::string& name) const {
  auto it = std::find(gpu_types.begin(), gpu_types.end(), name);
  return it == gpu_types.end() ? kNone : static_cast<int>(it - gpu_types.begin());
}

int Cluster::queue_id(const std::string& name) const {
  for (size_t i = 0; i < queues.size(); ++i) {
    if (queues[i].name == name) return static_cast<int>(i);
  }
  return kNone;
}

NodeFree Cluster::capacity(int node) const {
  NodeFree f;
  f.cpu_milli = nodes[node].cpu_milli;
  f.memory_mib = nodes[node].memory_mib;
  for (int g = 0; g < nodes[node].gpu_count; ++g) f.gpu[g] = node_capacity[node];
  return f;
}

int64_t Cluster::total_gpu_milli() const {
  int64_t total = 0;
  for (const NodeSpec& n : nodes) total += static_cast<int64_t>(n.gpu_count) * kGpuMilli;
  return total;
}

namespace {

int intern(std::map<std::string, int>& ids, const std::string& label) {
  auto [it, inserted] = ids.try_emplace(label, static_cast<int>(ids.size()));
  return it->second;
}

}  // namespace

Cluster make_cluster(std::vector<NodeSpec> nodes, std::vector<QueueSpec> queues) {
  Cluster c;
  c.nodes = std::move(nodes);
  c.queues = std::move(queues);
  if (c.queues.empty()) {
    QueueSpec q;
    q.name = "default";
    c.queues.push_back(std::move(q));
  }
  std::array<std::map<std::string, int>, 4> domain_ids;
  for (int level = 0; level < 4; ++level) c.node_domain[level].resize(c.nodes.size());
  for (size_t i = 0; i < c.nodes.size(); ++i) {
    const NodeSpec& n = c.nodes[i];
    int type = kNone;
    if (n.gpu_count > 0) {
      type = c.gpu_type_id(n.gpu_type);
      if (type == kNone) {
        type = static_cast<int>(c.gpu_types.size());
        c.gpu_types.push_back(n.gpu_type);
      }
    }
    c.node_gpu_type.push_back(type);
    c.node_capacity.push_back(n.mig_slices > 0 ? n.mig_slices : kGpuMilli);
    // A node without a label is its own domain at that level (it shares nothing).
    const std::string own = "\x01node:" + n.name;
    c.node_domain[0][i] = static_cast<int>(i);
    c.node_domain[1][i] = intern(domain_ids[1], n.nvlink_domain.empty() ? own : n.nvlink_domain);
    c.node_domain[2][i] = intern(domain_ids[2], n.leaf_switch.empty() ? own : n.leaf_switch);
    c.node_domain[3][i] = intern(domain_ids[3], n.spine.empty() ? own : n.spine);
  }
  c.domain_count[0] = static_cast<int>(c.nodes.size());
  for (int level = 1; level < 4; ++level) c.domain_count[level] = static_cast<int>(domain_ids[level].size());
  for (int level = 0; level < 4; ++level) {
    c.domain_nodes[level].resize(c.domain_count[level]);
    for (size_t i = 0; i < c.nodes.size(); ++i) c.domain_nodes[level][c.node_domain[level][i]].push_back(static_cast<int>(i));
  }
  for (const QueueSpec& q : c.queues) {
    c.queue_cohort.push_back(q.cohort.empty() ? kNone : intern(c.cohort_ids, q.cohort));
  }
  return c;
}

ClusterState make_empty_state(const Cluster& cluster) {
  ClusterState s;
  s.cluster = &cluster;
  for (size_t i = 0; i < cluster.nodes.size(); ++i) s.free.push_back(cluster.capacity(static_cast<int>(i)));
  return s;
}

}  // namespace koi::cluster
