#include "cluster/placement.h"

#include <algorithm>
#include <bit>

namespace koi::cluster {

int units_per_device(const Cluster& cluster, int node, const Request& r) {
  bool mig_node = cluster.nodes[node].mig_slices > 0;
  if (r.mig_slices > 0) return mig_node ? r.mig_slices : -1;
  if (r.fractional()) return mig_node ? -1 : r.gpu_milli;
  return cluster.node_capacity[node];
}

bool node_allowed(const Cluster& cluster, int node, const Job& job) {
  if (job.request.gpus == 0) return true;
  int type = cluster.node_gpu_type[node];
  if (type == kNone) return false;
  return job.gpu_types.empty() ||
         std::find(job.gpu_types.begin(), job.gpu_types.end(), type) != job.gpu_types.end();
}

std::optional<Placement> fit_on_node(const Cluster& cluster, int node, const NodeFree& free,
                                     const Request& r) {
  if (free.cpu_milli < r.cpu_milli || free.memory_mib < r.memory_mib) return std::nullopt;
  Placement p{.node = node};
  if (r.gpus == 0) return p;
  int units = units_per_device(cluster, node, r);
  if (units < 0) return std::nullopt;
  p.units = units;
  int gpu_count = cluster.nodes[node].gpu_count;
  if (units < cluster.node_capacity[node]) {
    // A share of one device: the fullest device that still has room (pack, keep whole GPUs).
    int best = kNone;
    for (int g = 0; g < gpu_count; ++g) {
      if (free.gpu[g] >= units && (best == kNone || free.gpu[g] < free.gpu[best])) best = g;
    }
    if (best == kNone) return std::nullopt;
    p.gpu_mask = 1u << best;
    return p;
  }
  int taken = 0;
  for (int g = 0; g < gpu_count && taken < r.gpus; ++g) {
    if (free.gpu[g] == units) {
      p.gpu_mask |= 1u << g;
      ++taken;
    }
  }
  if (taken < r.gpus) return std::nullopt;
  return p;
}

void apply_placement(NodeFree& free, const Placement& p, const Request& r, int sign) {
  free.cpu_milli += sign * r.cpu_milli;
  free.memory_mib += sign * r.memory_mib;
  for (int g = 0; g < kMaxGpusPerNode; ++g) {
    if (p.gpu_mask & (1u << g)) free.gpu[g] += sign * p.units;
  }
}

double node_fragmentation(const Cluster& cluster, int node, const NodeFree& free,
                          const std::vector<WorkloadClass>& workload) {
  int gpu_count = cluster.nodes[node].gpu_count;
  int64_t free_total = 0;
  for (int g = 0; g < gpu_count; ++g) free_total += free.gpu[g];
  if (free_total == 0) return 0;
  double frag = 0;
  for (const WorkloadClass& cls : workload) {
    const Request& r = cls.request;
    if (r.gpus == 0) continue;  // CPU-only tasks do not use GPUs, so they cannot strand them
    int units = units_per_device(cluster, node, r);
    if (units < 0) continue;    // a task that can never run here does not measure this node
    if (free.cpu_milli < r.cpu_milli || free.memory_mib < r.memory_mib) {
      frag += cls.weight * static_cast<double>(free_total);
      continue;
    }
    int usable = 0;
    int64_t stranded = 0;
    for (int g = 0; g < gpu_count; ++g) {
      if (free.gpu[g] >= units) {
        ++usable;
      } else {
        stranded += free.gpu[g];
      }
    }
    frag += cls.weight * static_cast<double>(usable < r.gpus ? free_total : stranded);
  }
  return frag * kGpuMilli / cluster.node_capacity[node];
}

namespace {

bool same_free(const NodeFree& a, const NodeFree& b) {
  return a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib && a.gpu == b.gpu;
}

}  // namespace

FragmentationCache::FragmentationCache(const Cluster& cluster, const std::vector<WorkloadClass>& workload)
    : cluster_(cluster),
      workload_(workload),
      classes_(workload.size()),
      free_(cluster.nodes.size()),
      version_(cluster.nodes.size(), 0),
      free_total_(cluster.nodes.size(), 0),
      value_(cluster.nodes.size(), 0),
      units_(cluster.nodes.size() * workload.size(), -1),
      usable_(cluster.nodes.size() * workload.size(), 0),
      stranded_(cluster.nodes.size() * workload.size(), 0),
      terms_(workload.size()) {}

void FragmentationCache::refresh(int node, const NodeFree& free) {
  if (version_[node] != 0 && same_free(free_[node], free)) return;
  ++version_[node];
  free_[node] = free;
  const int gpu_count = cluster_.nodes[node].gpu_count;
  int64_t free_total = 0;
  for (int g = 0; g < gpu_count; ++g) free_total += free.gpu[g];
  free_total_[node] = free_total;
  const size_t base = static_cast<size_t>(node) * classes_;
  for (size_t c = 0; c < classes_; ++c) {
    const Request& r = workload_[c].request;
    int units = -1, usable = 0;
    int64_t stranded = 0;
    if (r.gpus != 0) units = units_per_device(cluster_, node, r);
    if (units >= 0) {
      for (int g = 0; g < gpu_count; ++g) {
        if (free.gpu[g] >= units) {
          ++usable;
        } else {
          stranded += free.gpu[g];
        }
      }
    }
    units_[base + c] = units, usable_[base + c] = usable, stranded_[base + c] = stranded;
    // The term node_fragmentation() adds for this class.
    if (units < 0) {
      terms_[c] = -1;
    } else if (free.cpu_milli < r.cpu_milli || free.memory_mib < r.memory_mib) {
      terms_[c] = free_total;
    } else {
      terms_[c] = usable < r.gpus ? free_total : stranded;
    }
  }
  value_[node] = free_total == 0 ? 0 : total(node);
}

double FragmentationCache::total(int node) const {
  double frag = 0;
  for (size_t c = 0; c < classes_; ++c) {
    if (terms_[c] >= 0) frag += workload_[c].weight * static_cast<double>(terms_[c]);
  }
  return frag * kGpuMilli / cluster_.node_capacity[node];
}

double FragmentationCache::before(int node, const NodeFree& free) {
  refresh(node, free);
  return value_[node];
}

int FragmentationCache::shape_id(const Request& r) {
  if (last_shape_ >= 0 && shapes_[last_shape_] == r) return last_shape_;
  auto it = std::find(shapes_.begin(), shapes_.end(), r);
  if (it == shapes_.end()) {
    it = shapes_.insert(shapes_.end(), r);
    memo_.emplace_back(cluster_.nodes.size());
  }
  last_shape_ = static_cast<int>(it - shapes_.begin());
  return last_shape_;
}

double FragmentationCache::after(int node, const NodeFree& free, const Placement& p, const Request& r) {
  refresh(node, free);
  Memo& m = memo_[shape_id(r)][node];
  if (m.version != version_[node]) m = {compute_after(node, free, p, r), version_[node]};
  return m.value;
}

double FragmentationCache::compute_after(int node, const NodeFree& free, const Placement& p, const Request& r) {
  const int64_t taken = static_cast<int64_t>(std::popcount(p.gpu_mask)) * p.units;
  const int64_t free_total = free_total_[node] - taken;
  if (free_total == 0) return 0;
  const int64_t cpu = free.cpu_milli - r.cpu_milli, memory = free.memory_mib - r.memory_mib;
  const size_t base = static_cast<size_t>(node) * classes_;
  for (size_t c = 0; c < classes_; ++c) {
    const Request& w = workload_[c].request;
    const int units = units_[base + c];
    if (units < 0) {
      terms_[c] = -1;
      continue;
    }
    if (cpu < w.cpu_milli || memory < w.memory_mib) {
      terms_[c] = free_total;
      continue;
    }
    int usable = usable_[base + c];
    int64_t stranded = stranded_[base + c];
    for (uint32_t mask = p.gpu_mask; mask != 0; mask &= mask - 1) {
      const int g = std::countr_zero(mask);
      const int64_t was = free.gpu[g], now = was - p.units;
      if (was >= units) --usable; else stranded -= was;
      if (now >= units) ++usable; else stranded += now;
    }
    terms_[c] = usable < w.gpus ? free_total : stranded;
  }
  return total(node);
}

namespace {

// Fraction of the node left free after the placement (GPU and CPU); smaller is a tighter fit.
double leftover(const Cluster& cluster, int node, const NodeFree& after) {
  const NodeSpec& spec = cluster.nodes[node];
  double left = spec.cpu_milli > 0 ? static_cast<double>(after.cpu_milli) / spec.cpu_milli : 0;
  if (spec.gpu_count > 0) {
    int64_t gpu_free = 0;
    for (int g = 0; g < spec.gpu_count; ++g) gpu_free += after.gpu[g];
    left += static_cast<double>(gpu_free) / (static_cast<double>(spec.gpu_count) * cluster.node_capacity[node]);
  }
  return left;
}

struct Candidate {
  Placement placement;
  double score = 0;
  double tie = 0;
};

// Scores placing one replica on `node`; lower is better. Returns false if it does not fit.
bool score_node(const Cluster& cluster, int node, const NodeFree& free, const Request& r,
                const PlaceOptions& options, Candidate* out) {
  std::optional<Placement> p = fit_on_node(cluster, node, free, r);
  if (!p) return false;
  out->placement = *p;
  if (options.fit == Fit::kFirstFit) return true;
  NodeFree after = free;
  apply_placement(after, *p, r, -1);
  out->tie = leftover(cluster, node, after);
  out->score = out->tie;
  if (options.fit == Fit::kFgd && options.workload && !options.workload->empty()) {
    if (options.fgd_cache) {
      out->score = options.fgd_cache->after(node, free, *p, r) - options.fgd_cache->before(node, free);
    } else {
      out->score = node_fragmentation(cluster, node, after, *options.workload) -
                   node_fragmentation(cluster, node, free, *options.workload);
    }
  }
  return true;
}

bool better(const Candidate& a, const Candidate& b) {
  if (a.score != b.score) return a.score < b.score;
  if (a.tie != b.tie) return a.tie < b.tie;
  return a.placement.node < b.placement.node;
}

bool usable(const Cluster& cluster, int node, const Job& job, const PlaceOptions& options) {
  if (options.excluded_nodes && (*options.excluded_nodes)[node]) return false;
  if (options.domain_level > 0 && cluster.node_domain[options.domain_level][node] != options.domain) return false;
  return node_allowed(cluster, node, job);
}

// The best node among `nodes` for one replica.
std::optional<Placement> best_node(const Cluster& cluster, const std::vector<NodeFree>& free,
                                   const Request& r, const std::vector<int>& nodes,
                                   const PlaceOptions& options) {
  std::optional<Candidate> best;
  for (int node : nodes) {
    Candidate c;
    if (!score_node(cluster, node, free[node], r, options, &c)) continue;
    if (options.fit == Fit::kFirstFit) return c.placement;
    if (!best || better(c, *best)) best = c;
  }
  if (!best) return std::nullopt;
  return best->placement;
}

// One replica, no topology: scan every usable node (or up to max_nodes_scored feasible ones,
// starting at an offset spread by job id, as kube-scheduler does on large clusters).
std::optional<Placement> place_single(const Cluster& cluster, const std::vector<NodeFree>& free,
                                      const Job& job, const PlaceOptions& options) {
  int n = static_cast<int>(cluster.nodes.size());
  if (n == 0) return std::nullopt;
  int start = options.max_nodes_scored > 0 ? static_cast<int>((static_cast<uint64_t>(job.id) * 2654435761u) % n) : 0;
  std::optional<Candidate> best;
  int feasible = 0;
  for (int i = 0; i < n; ++i) {
    int node = start + i < n ? start + i : start + i - n;
    if (!usable(cluster, node, job, options)) continue;
    Candidate c;
    if (!score_node(cluster, node, free[node], job.request, options, &c)) continue;
    if (options.fit == Fit::kFirstFit) return c.placement;
    if (!best || better(c, *best)) best = c;
    if (options.max_nodes_scored > 0 && ++feasible >= options.max_nodes_scored) break;
  }
  if (!best) return std::nullopt;
  return best->placement;
}

int fit_count_on_node(const Cluster& cluster, int node, NodeFree free, const Request& r, int cap) {
  int count = 0;
  while (count < cap) {
    std::optional<Placement> p = fit_on_node(cluster, node, free, r);
    if (!p) break;
    apply_placement(free, *p, r, -1);
    ++count;
    if (r.gpus == 0 && r.cpu_milli == 0 && r.memory_mib == 0) return cap;  // an empty request fits anywhere
  }
  return count;
}

// Keeps the nodes of the domains (at `level`) that best hold `replicas`: the tightest single
// domain that holds them all, else the fewest largest domains. Returns false if even all
// domains together cannot hold them.
bool narrow_to_domains(const Cluster& cluster, const std::vector<NodeFree>& free, const Request& r,
                       int replicas, int level, bool must_fit_one, std::vector<int>* nodes) {
  std::vector<std::pair<int, int>> counts;  // (domain, fitting replicas)
  std::vector<int> index(cluster.domain_count[level], kNone);
  for (int node : *nodes) {
    int d = cluster.node_domain[level][node];
    if (index[d] == kNone) {
      index[d] = static_cast<int>(counts.size());
      counts.push_back({d, 0});
    }
    int& c = counts[index[d]].second;
    if (c < replicas) c += fit_count_on_node(cluster, node, free[node], r, replicas - c);
  }
  std::vector<std::pair<int, int>> whole;
  for (const auto& dc : counts) {
    if (dc.second >= replicas) whole.push_back(dc);
  }
  std::vector<char> keep(cluster.domain_count[level], 0);
  if (!whole.empty()) {
    auto best = std::min_element(whole.begin(), whole.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : a.first < b.first;
    });
    keep[best->first] = 1;
  } else {
    if (must_fit_one) return false;
    std::sort(counts.begin(), counts.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first < b.first;
    });
    int total = 0;
    for (const auto& dc : counts) {
      if (total >= replicas || dc.second == 0) break;
      keep[dc.first] = 1;
      total += dc.second;
    }
    if (total < replicas) return false;
  }
  std::erase_if(*nodes, [&](int node) { return !keep[cluster.node_domain[level][node]]; });
  return true;
}

}  // namespace

int count_fitting(const Cluster& cluster, std::vector<NodeFree>& free, const Job& job, int cap,
                  const std::vector<int>* nodes) {
  int count = 0;
  int n = nodes ? static_cast<int>(nodes->size()) : static_cast<int>(cluster.nodes.size());
  for (int i = 0; i < n && count < cap; ++i) {
    int node = nodes ? (*nodes)[i] : i;
    if (!node_allowed(cluster, node, job)) continue;
    count += fit_count_on_node(cluster, node, free[node], job.request, cap - count);
  }
  return count;
}

std::optional<std::vector<Placement>> try_place(const Cluster& cluster, std::vector<NodeFree>& free,
                                                const Job& job, int replicas,
                                                const PlaceOptions& options) {
  if (replicas <= 0) return std::vector<Placement>{};
  if (replicas == 1 && options.domain_level == 0) {
    std::optional<Placement> p = place_single(cluster, free, job, options);
    if (!p) return std::nullopt;
    apply_placement(free[p->node], *p, job.request, -1);
    return std::vector<Placement>{*p};
  }
  std::vector<int> nodes;
  for (int node = 0; node < static_cast<int>(cluster.nodes.size()); ++node) {
    if (usable(cluster, node, job, options)) nodes.push_back(node);
  }
  int required = static_cast<int>(job.topology);
  if (required > 0 && options.domain_level < required &&
      !narrow_to_domains(cluster, free, job.request, replicas, required, true, &nodes)) {
    return std::nullopt;
  }
  // Preference: span as few leaf switches, then NVLink domains, as possible.
  for (int level : {static_cast<int>(Topology::kLeaf), static_cast<int>(Topology::kNvlink)}) {
    if (!narrow_to_domains(cluster, free, job.request, replicas, level, false, &nodes)) return std::nullopt;
  }
  std::vector<Placement> placed;
  for (int i = 0; i < replicas; ++i) {
    std::optional<Placement> p = best_node(cluster, free, job.request, nodes, options);
    if (!p) {
      for (const Placement& undo : placed) apply_placement(free[undo.node], undo, job.request, +1);
      return std::nullopt;
    }
    apply_placement(free[p->node], *p, job.request, -1);
    placed.push_back(*p);
  }
  return placed;
}

}  // namespace koi::cluster
