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

class FragmentationCache;

struct PlaceOptions {
  Fit fit = Fit::kFgd;
  FragmentationCache* fgd_cache = nullptr;  // for kFgd: the per-node terms between calls (same results)
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

// FGD's per-node terms, kept between scoring calls: for each node, the free state they were
// computed for and, per workload class, how many devices can hold the class and how much free
// GPU it strands. A node whose free state is unchanged reuses them (only the nodes a decision
// touched are recomputed), and scoring a placement updates only the devices it takes instead
// of rescanning the node; the score of a request shape on an unchanged node is remembered
// (the placement follows from the state and the shape), so a pod shaped like an earlier one
// is scored again only on the nodes that changed since. Results equal node_fragmentation() bit for bit: the same integer
// terms, summed in the same order (placement_test.cc checks it on random states). One per
// plan() call (the workload is fixed); not thread-safe.
class FragmentationCache {
 public:
  FragmentationCache(const Cluster& cluster, const std::vector<WorkloadClass>& workload);
  // node_fragmentation(cluster, node, free, workload).
  double before(int node, const NodeFree& free);
  // node_fragmentation() of the node once `p` of request `r` is taken from `free`.
  double after(int node, const NodeFree& free, const Placement& p, const Request& r);

 private:
  // Brings the node's terms up to `free` (recomputed only when it differs from what they
  // were computed for; that bumps the node's version, which voids its remembered scores).
  void refresh(int node, const NodeFree& free);
  int shape_id(const Request& r);
  double compute_after(int node, const NodeFree& free, const Placement& p, const Request& r);
  double total(int node) const;  // the weighted sum of terms_ (-1: none)

  const Cluster& cluster_;
  const std::vector<WorkloadClass>& workload_;
  const size_t classes_;
  // Per node, in flat arrays so that a scan over the nodes reads memory in order.
  std::vector<NodeFree> free_;      // the state the terms are for
  std::vector<uint32_t> version_;   // 0: never computed
  std::vector<int64_t> free_total_;
  std::vector<double> value_;
  std::vector<int> units_;          // [node * classes + c]: units per device (-1: cannot run)
  std::vector<int> usable_;         // [node * classes + c]: devices with room for one device's share
  std::vector<int64_t> stranded_;   // [node * classes + c]: free units on devices without room
  struct Memo {
    double value = 0;
    uint32_t version = 0;  // the node's version it holds for
  };
  std::vector<std::vector<Memo>> memo_;  // [shape][node]: after() of that shape
  std::vector<Request> shapes_;          // the request shapes after() was asked about
  int last_shape_ = -1;
  std::vector<int64_t> terms_;           // scratch
};

// Places `replicas` replicas of `job` (all or nothing). See the file comment.
std::optional<std::vector<Placement>> try_place(const Cluster& cluster, std::vector<NodeFree>& free,
                                                const Job& job, int replicas,
                                                const PlaceOptions& options);

// How many replicas of `job` would fit, at most `cap`, ignoring topology. Changes nothing.
int count_fitting(const Cluster& cluster, std::vector<NodeFree>& free, const Job& job, int cap,
                  const std::vector<int>* nodes = nullptr);

}  // namespace koi::cluster
