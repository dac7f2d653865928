// The scheduler: one pure function from (cluster state, pending work, now) to decisions.
//
// plan() reads a ClusterState and the pending jobs and returns what to do now: admit and place
// jobs, preempt running ones, shrink or grow elastic ones; and, for every job it leaves
// pending, why. It performs no I/O and keeps no state between calls, so the live control
// plane and `koi sim` run the same code, and a test can check it exactly at toy scale.
// The decisions are listed in the order they must be applied (a preemption comes before the
// admission it makes room for); apply_decision() applies one to a ClusterState.
//
// A Policy picks one option on each axis:
//   order     fifo (arrival) | priority (then arrival) | fair (queue priority, then DRF:
//             the queue with the smallest dominant share goes next, then priority, arrival)
//   blocking  strict (the first job that cannot start blocks all behind it) | backfill (EASY:
//             it gets a reservation at its earliest start, later jobs start only if they do
//             not delay it) | greedy (every job that fits starts)
//   fit       first-fit | best-fit | fgd (fragmentation gradient descent)
//   preemption, elastic resize: on/off
// Named presets: see policy_by_name().
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "cluster/placement.h"
#include "cluster/types.h"

namespace koi::cluster {

enum class Order { kFifo, kPriority, kFair };
enum class Blocking { kStrict, kBackfill, kGreedy };

struct Policy {
  std::string name = "koi";
  Order order = Order::kFair;
  Blocking blocking = Blocking::kBackfill;
  Fit fit = Fit::kFgd;
  bool preemption = true;
  bool elastic = true;
  int max_nodes_scored = 0;             // see PlaceOptions; 0 scores every node
  std::vector<WorkloadClass> workload;  // FGD's expected workload; empty: taken from pending
};

// "koi" (fair + backfill + fgd + preemption + elastic), "fifo" (fifo + strict + first-fit),
// "best-fit" (fifo + greedy + best-fit), "fgd" (fifo + greedy + fgd), "priority"
// (priority + greedy + best-fit + preemption), "drf" (fair + greedy + best-fit),
// "backfill" (fifo + backfill + best-fit).
Result<Policy> policy_by_name(std::string_view name);
std::string policy_names();  // "koi, fifo, ..." for help texts

enum class DecisionKind { kAdmit, kPreempt, kShrink, kGrow };

struct Decision {
  DecisionKind kind = DecisionKind::kAdmit;
  int job_id = 0;
  std::vector<Placement> placements;  // admit/grow: new replicas; shrink: removed replicas
  int by_job = kNone;                 // preempt/shrink: the job that needed the room
};

enum class Reason {
  kQuota,       // the queue's quota (with borrowing) does not allow it
  kNoGpuType,   // no node of an allowed GPU type could ever hold one replica
  kResources,   // a single replica does not fit on any node now
  kGang,        // fewer than min_replicas replicas fit now
  kTopology,    // enough room, but not inside one required domain
  kReserved,    // backfill: starting it now would delay the reserved job
  kBehindHead,  // strict order: waiting behind a blocked job
};
std::string_view reason_name(Reason reason);

struct Explanation {
  int job_id = 0;
  Reason reason = Reason::kResources;
  std::string message;
};

struct Plan {
  std::vector<Decision> decisions;
  std::vector<Explanation> waiting;  // one per pending job that was not admitted
  int reserved_job = kNone;          // backfill reservation, if any
  double reserved_start = 0;         // its expected start (infinity if unknown)
};

Plan plan(const ClusterState& state, const std::vector<Job>& pending, double now, const Policy& policy);

// Applies one decision to the state; `job` is the admitted job for kAdmit (ignored otherwise).
// A preempted job is removed from state.running; the caller requeues it.
void apply_decision(ClusterState& state, const Decision& decision, const Job* job, double now);

// The workload classes of a set of jobs (by GPU shape), the most common first, at most `limit`.
std::vector<WorkloadClass> workload_of(const std::vector<Job>& jobs, size_t limit = 32);

}  // namespace koi::cluster
