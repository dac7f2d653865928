// Placement: where the replicas of one job go, given the free resources of every node.
//
// Node choice is a policy (first fit, best fit, or FGD: the node whose fragmentation grows
// least for the expected workload, Weng et al., USENIX ATC'23). Gangs place all replicas or
// none; a required topology level keeps every replica inside one domain (NVLink domain, leaf
// switch, spine) and, even without a requirement, replicas are packed into as few leaf
// switches and NVLink domains as possible.
//
// try_place() is prepare-then-commit: on success it applies the placements to `free` and
// returns them; on failure it returns nothing and leaves `free` exactly as it was.
// Pure functions over plain data; thread-compatible.
#pragma once

#include <optional>
#include <vector>

#include "cluster/types.h"

namespace koi::cluster {

enum class Fit { kFirstFit, kBestFit, kFgd };

// One class of the expected workload (FGD's "target workload"): a request shape and its share.
struct WorkloadClass {
  Request request;
  double weight = 0;
};

struct PlaceOptions {
  Fit fit = Fit::kFgd;
  const std::vector<WorkloadClass>* workload = nullptr;  // for kFgd; empty/null: best fit
  const std::vector<char>* excluded_nodes = nullptr;     // nodes that must not be used
  int max_nodes_scored = 0;  // single replicas: stop after this many feasible nodes (0 = all)
  int domain_level = 0;      // restrict to the domain `domain` at this level (0: no restriction)
  int domain = kNone;
};

// Units one replica takes on each device of `node`, or -1 if the device kind cannot serve it
// (a MIG request on a plain GPU, a fractional request on a MIG GPU).
int units_per_device(const Cluster& cluster, int node, const Request& r);
// Whether the node's GPU type is allowed for the job (CPU-only jobs run anywhere).
bool node_allowed(const Cluster& cluster, int node, const Job& job);
// One replica on one node: the devices it would take, or nothing if it does not fit.
std::optional<Placement> fit_on_node(const Cluster& cluster, int node, const NodeFree& free,
                                     const Request& r);
// Adds (sign = +1, releasing) or removes (sign = -1, allocating) one replica's resources.
void apply_placement(NodeFree& free, const Placement& p, const Request& r, int sign);
// FGD fragmentation of one node for a workload, in GPU milli: the free GPU capacity that the
// workload's tasks could not use, weighted by their share.
double node_fragmentation(const Cluster& cluster, int node, const NodeFree& free,
                          const std::vector<WorkloadClass>& workload);

// Places `replicas` replicas of `job` (all or nothing). See the file comment.
std::optional<std::vector<Placement>> try_place(const Cluster& cluster, std::vector<NodeFree>& free,
                                                const Job& job, int replicas,
                                                const PlaceOptions& options);

// How many replicas of `job` would fit, at most `cap`, ignoring topology. Changes nothing.
int count_fitting(const Cluster& cluster, std::vector<NodeFree>& free, const Job& job, int cap,
                  const std::vector<int>* nodes = nullptr);

}  // namespace koi::cluster
