// The trace simulator behind `koi sim`: a deterministic, event-driven replay of jobs through
// plan() (scheduler.h), the same code the control plane runs.
//
// Replay mode: jobs arrive at their submit times (divided by the arrival scale: 2 means twice
// the arrival rate; with repeat = k the trace is replayed k times back to back, each copy
// shifted by the trace's scaled span); after each batch of arrivals and completions at one instant the
// scheduler plans and its decisions are applied, and plans again at the same instant until a
// plan decides nothing (as the control plane plans again in its next round: a victim,
// requeued, may start elsewhere; a reservation may move). A job runs for duration x max_replicas
// replica-seconds of work at its current replica count; a preempted job restarts from zero.
// Fill mode (the FGD paper's methodology): tasks sampled from the trace with replacement
// arrive one by one and never leave; each is placed at once or fails; it stops when the
// arrived GPU demand reaches `fill_limit` x cluster GPU capacity. Preemption and elastic
// resize are off in fill mode: it measures placement (fragmentation) alone.
// Jobs that could not run even on an empty cluster are counted as unschedulable and dropped.
// Same inputs and seed give byte-identical results. Not thread-safe; one run per call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/scheduler.h"
#include "cluster/types.h"

namespace koi::cluster {

enum class SimMode { kReplay, kFill };

struct SimOptions {
  Policy policy;
  SimMode mode = SimMode::kReplay;
  double arrival_scale = 1.0;
  int repeat = 1;  // replay: the trace runs this many times back to back (load inflation)
  uint64_t seed = 1;
  double fill_limit = 1.3;
  size_t curve_points = 200;  // the allocation curve is down-sampled to about this many points
  bool record_decisions = false;  // replay: keep every instant's admissions and preemptions
  // Called after every planning round with the state after its decisions (tests check
  // invariants here).
  std::function<void(const ClusterState&, const Plan&)> on_step;
};

struct QueueResult {
  std::string name;
  int finished = 0;
  double gpu_seconds = 0;  // replay: GPU-seconds used; fill: GPUs allocated at the end
  double share = 0;        // of all queues' gpu_seconds
  double avg_jct = 0;
  double avg_ftf = 0;      // finish-time fairness: JCT / run time, 1 = no waiting
  double max_ftf = 0;
};

// One planning instant's admissions and preemptions (job names, sorted).
struct SimStep {
  double time = 0;
  std::vector<std::string> admitted, preempted;
};

struct SimResult {
  std::string policy;
  std::string mode;
  int jobs = 0;
  int unschedulable = 0;
  // Replay.
  int finished = 0;
  int unfinished = 0;
  int preemptions = 0;
  int unstable_instants = 0;  // instants whose plans kept deciding for 64 rounds (a cycle)
  double avg_jct = 0, p99_jct = 0;
  double avg_queueing = 0, p99_queueing = 0;
  double makespan = 0;
  double avg_allocation = 0;              // time-weighted GPU allocation rate
  double unallocated_at_saturation = 0;   // time-weighted unallocated GPU share while GPU work waits
  double saturated_seconds = 0;
  // Fill.
  int failed = 0;
  double first_failure_arrived = 0;   // arrived demand / capacity at the first failed task
  double unallocated_at_full = 0;     // unallocated GPU share when arrived demand reaches 100%
  double allocation_at_end = 0;
  // Allocation curve: (time in seconds, or arrived demand / capacity in fill mode; rate).
  std::vector<std::pair<double, double>> curve;
  std::vector<QueueResult> queues;
  std::vector<std::string> waiting;  // explanations of jobs still waiting at the end (first 20)
  std::vector<SimStep> decisions;    // with record_decisions: the instants that decided something
};

Result<SimResult> simulate(const Cluster& cluster, const std::vector<Job>& jobs, const SimOptions& options);

// JSON of a result (stable key order and number formatting, so equal results are equal text).
std::string sim_json(const SimResult& result);
// JSON of result.decisions: [{"time": T, "admit": [...], "preempt": [...]}, ...].
std::string sim_decisions_json(const SimResult& result);
// A small self-contained SVG chart of the allocation curve.
std::string sim_svg(const SimResult& result);

}  // namespace koi::cluster
