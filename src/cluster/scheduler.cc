#include "cluster/scheduler.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <tuple>

#include "base/check.h"
#include "cluster/quota.h"

namespace koi::cluster {

Result<Policy> policy_by_name(std::string_view name) {
  Policy p;
  p.name = std::string(name);
  if (name == "koi") return p;
  p.preemption = false;
  p.elastic = false;
  p.order = Order::kFifo;
  p.fit = Fit::kBestFit;
  if (name == "fifo") {
    p.blocking = Blocking::kStrict;
    p.fit = Fit::kFirstFit;
  } else if (name == "best-fit") {
    p.blocking = Blocking::kGreedy;
  } else if (name == "fgd") {
    p.blocking = Blocking::kGreedy;
    p.fit = Fit::kFgd;
  } else if (name == "priority") {
    p.order = Order::kPriority;
    p.blocking = Blocking::kGreedy;
    p.preemption = true;
  } else if (name == "drf") {
    p.order = Order::kFair;
    p.blocking = Blocking::kGreedy;
  } else if (name == "backfill") {
    p.blocking = Blocking::kBackfill;
  } else {
    return Status::invalid_argument(fmt::format("unknown policy '{}'; use one of: {}", name, policy_names()));
  }
  return p;
}

std::string policy_names() { return "koi, fifo, best-fit, fgd, priority, drf, backfill"; }

std::string_view reason_name(Reason reason) {
  switch (reason) {
    case Reason::kQuota: return "quota";
    case Reason::kNoGpuType: return "gpu-type";
    case Reason::kResources: return "resources";
    case Reason::kGang: return "gang";
    case Reason::kTopology: return "topology";
    case Reason::kReserved: return "reserved";
    case Reason::kBehindHead: return "behind-head";
  }
  return "unknown";
}

std::vector<WorkloadClass> workload_of(const std::vector<Job>& jobs, size_t limit) {
  struct Sum {
    double count = 0, cpu = 0, memory = 0;
  };
  std::map<std::tuple<int, int, int>, Sum> classes;
  for (const Job& j : jobs) {
    Sum& s = classes[{j.request.gpus, j.request.gpu_milli, j.request.mig_slices}];
    s.count += 1;
    s.cpu += static_cast<double>(j.request.cpu_milli);
    s.memory += static_cast<double>(j.request.memory_mib);
  }
  std::vector<WorkloadClass> out;
  for (const auto& [key, s] : classes) {
    Request r{.cpu_milli = static_cast<int64_t>(s.cpu / s.count), .memory_mib = static_cast<int64_t>(s.memory / s.count),
              .gpus = std::get<0>(key), .gpu_milli = std::get<1>(key), .mig_slices = std::get<2>(key)};
    out.push_back({r, s.count / static_cast<double>(jobs.size())});
  }
  std::stable_sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.weight > b.weight; });
  if (out.size() > limit) out.resize(limit);
  return out;
}

void apply_decision(ClusterState& state, const Decision& d, const Job* job, double now) {
  if (d.kind == DecisionKind::kAdmit) {
    KOI_CHECK(job != nullptr);
    RunningJob r{.job = *job, .start_time = now, .replicas = d.placements};
    for (const Placement& p : d.placements) apply_placement(state.free[p.node], p, job->request, -1);
    state.running.push_back(std::move(r));
    return;
  }
  auto it = std::find_if(state.running.begin(), state.running.end(),
                         [&](const RunningJob& r) { return r.job.id == d.job_id; });
  KOI_CHECK(it != state.running.end());
  const Request& req = it->job.request;
  if (d.kind == DecisionKind::kPreempt) {
    for (const Placement& p : it->replicas) apply_placement(state.free[p.node], p, req, +1);
    state.running.erase(it);
  } else if (d.kind == DecisionKind::kShrink) {
    for (const Placement& p : d.placements) {
      auto pos = std::find(it->replicas.rbegin(), it->replicas.rend(), p);
      KOI_CHECK(pos != it->replicas.rend());
      apply_placement(state.free[p.node], p, req, +1);
      it->replicas.erase(std::next(pos).base());
    }
  } else {
    for (const Placement& p : d.placements) {
      apply_placement(state.free[p.node], p, req, -1);
      it->replicas.push_back(p);
    }
  }
}

namespace {

constexpr double kInfinity = std::numeric_limits<double>::infinity();

const char* level_name(Topology t) {
  switch (t) {
    case Topology::kNvlink: return "NVLink domain";
    case Topology::kLeaf: return "leaf switch";
    case Topology::kSpine: return "spine";
    case Topology::kNone: break;
  }
  return "node";
}

std::string request_text(const Request& r) {
  std::string gpu;
  if (r.mig_slices > 0) {
    gpu = fmt::format(", {} MIG slices", r.mig_slices);
  } else if (r.fractional()) {
    gpu = fmt::format(", {:g} GPU", r.gpu_milli / 1000.0);
  } else if (r.gpus > 0) {
    gpu = fmt::format(", {} GPU", r.gpus);
  }
  return fmt::format("{:g} CPU, {} MiB{}", r.cpu_milli / 1000.0, r.memory_mib, gpu);
}

// Identifies jobs that must fail alike within one round (same shape, queue and rank).
using FailKey = std::tuple<int64_t, int64_t, int, int, int, std::vector<int>, int, int, int, int>;

FailKey fail_key(const Job& j) {
  return {j.request.cpu_milli, j.request.memory_mib, j.request.gpus, j.request.gpu_milli, j.request.mig_slices,
          j.gpu_types, j.min_replicas, static_cast<int>(j.topology), j.queue, j.priority};
}

// A unit of room that preemption can take back: replicas [target, kept) of a running job.
struct Unit {
  int run = 0;
  int target = 0;            // replicas the job keeps if this unit is taken
  bool other_queue = false;  // a whole job of another queue: taken only while that queue is not guaranteed
};

class Planner {
 public:
  Planner(const ClusterState& state, const std::vector<Job>& pending, double now, const Policy& policy)
      : c_(*state.cluster), state_(state), pending_(pending), now_(now), policy_(policy),
        free_(state.free), quota_(*state.cluster, state.running), excluded_(c_.nodes.size(), 0) {
    for (const RunningJob& r : state.running) kept_.push_back(static_cast<int>(r.replicas.size()));
    workload_ = policy.workload.empty() ? workload_of(pending) : policy.workload;
    options_.fit = policy.fit;
    options_.workload = &workload_;
    options_.max_nodes_scored = policy.max_nodes_scored;
    if (policy.fit == Fit::kFgd) {
      fgd_cache_ = std::make_unique<FragmentationCache>(c_, workload_);
      options_.fgd_cache = fgd_cache_.get();
    }
  }

  Plan run() {
    std::vector<std::vector<int>> lanes = make_lanes();
    std::vector<size_t> next(lanes.size(), 0);
    bool blocked = false;
    int head = kNone;
    for (;;) {
      int lane = pick_lane(lanes, next);
      if (lane == kNone) break;
      const Job& job = pending_[lanes[lane][next[lane]++]];
      if (blocked) {
        wait(job, Reason::kBehindHead, fmt::format("waiting behind job '{}' (strict order)", pending_[head].name));
        continue;
      }
      Explanation why;
      if (try_admit(job, &why)) continue;
      if (why.reason != Reason::kNoGpuType) passed_over_.push_back(&job);
      bool resource_failure = why.reason != Reason::kQuota && why.reason != Reason::kNoGpuType;
      if (resource_failure && policy_.blocking == Blocking::kStrict) {
        blocked = true;
        head = static_cast<int>(&job - pending_.data());
      } else if (resource_failure && policy_.blocking == Blocking::kBackfill && plan_.reserved_job == kNone) {
        reserve(job);
        why.message += plan_.reserved_start == kInfinity
                           ? "; reserved, but no start time is known (running jobs have no duration)"
                           : fmt::format("; reserved, expected to start at t={:g}", plan_.reserved_start);
      }
      wait(job, why.reason, why.message);
    }
    if (policy_.elastic) grow_elastic();
    return std::move(plan_);
  }

 private:
  std::vector<std::vector<int>> make_lanes() const {
    std::vector<int> order(pending_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
    auto by_arrival = [&](int a, int b) {
      const Job &x = pending_[a], &y = pending_[b];
      return std::tie(x.submit_time, x.id) < std::tie(y.submit_time, y.id);
    };
    auto by_priority = [&](int a, int b) {
      const Job &x = pending_[a], &y = pending_[b];
      if (x.priority != y.priority) return x.priority > y.priority;
      return by_arrival(a, b);
    };
    if (policy_.order == Order::kFifo) {
      std::sort(order.begin(), order.end(), by_arrival);
      return {order};
    }
    std::sort(order.begin(), order.end(), by_priority);
    if (policy_.order == Order::kPriority) return {order};
    std::vector<std::vector<int>> lanes(c_.queues.size());
    for (int i : order) lanes[pending_[i].queue].push_back(i);
    return lanes;
  }

  // Next lane to serve: the only one, or (fair) the highest-priority queue with the smallest
  // dominant share among those with work left.
  int pick_lane(const std::vector<std::vector<int>>& lanes, const std::vector<size_t>& next) const {
    int best = kNone;
    double best_share = 0;
    for (int lane = 0; lane < static_cast<int>(lanes.size()); ++lane) {
      if (next[lane] >= lanes[lane].size()) continue;
      double share = lanes.size() > 1 ? quota_.dominant_share(lane) : 0;
      if (best == kNone) {
        best = lane;
        best_share = share;
        continue;
      }
      int pa = c_.queues[lane].priority, pb = c_.queues[best].priority;
      if (pa > pb || (pa == pb && share < best_share)) {
        best = lane;
        best_share = share;
      }
    }
    return best;
  }

  void wait(const Job& job, Reason reason, std::string message) {
    if (!job.preempted_by.empty()) message += fmt::format(" (last preempted by job '{}')", job.preempted_by);
    plan_.waiting.push_back({job.id, reason, std::move(message)});
  }

  // The job as placement sees it: GPU types narrowed to those its queue's typed quota allows.
  Job placeable(const Job& job, int replicas, const QuotaBook& quota) const {
    Job j = job;
    if (job.request.gpus == 0) return j;
    std::vector<int> types;
    for (int t = 0; t < static_cast<int>(c_.gpu_types.size()); ++t) {
      bool allowed = job.gpu_types.empty() || std::find(job.gpu_types.begin(), job.gpu_types.end(), t) != job.gpu_types.end();
      if (allowed && quota.type_open(job.queue, t) && quota.admits(job, replicas, t, nullptr)) types.push_back(t);
    }
    if (types.size() < c_.gpu_types.size()) j.gpu_types = types.empty() ? std::vector<int>{kNone} : types;
    return j;
  }

  // Places min_replicas of the job on `free` within `quota`; charges both on success.
  std::optional<std::vector<Placement>> place_gang(const Job& job, std::vector<NodeFree>& free, QuotaBook& quota,
                                                   std::string* quota_why) const {
    if (!quota.admits(job, job.min_replicas, kNone, quota_why)) return std::nullopt;
    Job j = placeable(job, job.min_replicas, quota);
    std::optional<std::vector<Placement>> placed = try_place(c_, free, j, job.min_replicas, options_);
    if (placed) {
      for (const Placement& p : *placed) quota.add(job, 1, c_.node_gpu_type[p.node], +1);
    }
    return placed;
  }

  // Adds replicas beyond the gang, one at a time, up to max_replicas in total.
  std::vector<Placement> place_extra(const Job& job, int have, const Placement* anchor) {
    std::vector<Placement> extra;
    PlaceOptions o = options_;
    if (job.topology != Topology::kNone && anchor) {
      o.domain_level = static_cast<int>(job.topology);
      o.domain = c_.node_domain[o.domain_level][anchor->node];
    }
    for (int n = have; n < job.max_replicas; ++n) {
      if (!quota_.admits(job, 1, kNone, nullptr)) break;
      Job j = placeable(job, 1, quota_);
      std::optional<std::vector<Placement>> p = try_place(c_, free_, j, 1, o);
      if (!p) break;
      quota_.add(job, 1, c_.node_gpu_type[(*p)[0].node], +1);
      extra.push_back((*p)[0]);
    }
    return extra;
  }

  bool try_admit(const Job& job, Explanation* why) {
    bool restricted = plan_.reserved_job != kNone && !(job.duration >= 0 && now_ + job.duration <= plan_.reserved_start);
    options_.excluded_nodes = restricted ? &excluded_ : nullptr;
    auto key = std::make_pair(fail_key(job), restricted);
    if (auto it = failed_.find(key); it != failed_.end()) {
      *why = it->second;
      return false;
    }
    std::string quota_why;
    std::optional<std::vector<Placement>> placed = place_gang(job, free_, quota_, &quota_why);
    bool preempted = false;
    if (!placed) {
      diagnose(job, quota_why, restricted, why);
      if (plan_.reserved_job == kNone && policy_.preemption && why->reason != Reason::kNoGpuType) {
        placed = preempt_for(job);
        preempted = placed.has_value();
      }
    }
    options_.excluded_nodes = nullptr;
    if (!placed) {
      failed_[key] = *why;
      return false;
    }
    admit(job, std::move(*placed), restricted);
    if (preempted) retry_passed_over();
    return true;
  }

  void admit(const Job& job, std::vector<Placement> placements, bool restricted) {
    if (policy_.elastic) {
      options_.excluded_nodes = restricted ? &excluded_ : nullptr;
      std::vector<Placement> extra = place_extra(job, job.min_replicas, &placements[0]);
      placements.insert(placements.end(), extra.begin(), extra.end());
      options_.excluded_nodes = nullptr;
    }
    admitted_.push_back({&job, placements});
    plan_.decisions.push_back({DecisionKind::kAdmit, job.id, std::move(placements), kNone});
  }

  // A preemption may free more than its preemptor needs (a victim is whole). The jobs passed
  // over earlier in this round come first to that room, in their order, before the jobs after
  // the preemptor: otherwise a lower-priority job would take it, and the next round would
  // preempt that job for one passed over here (a plan must be stable: invariants_test).
  void retry_passed_over() {
    std::vector<const Job*> still;
    for (const Job* j : passed_over_) {
      std::optional<std::vector<Placement>> placed = place_gang(*j, free_, quota_, nullptr);
      if (!placed) {
        still.push_back(j);
        continue;
      }
      std::erase_if(plan_.waiting, [&](const Explanation& e) { return e.job_id == j->id; });
      admit(*j, std::move(*placed), false);
    }
    passed_over_ = std::move(still);
  }

  void diagnose(const Job& job, const std::string& quota_why, bool restricted, Explanation* why) {
    why->job_id = job.id;
    if (!quota_why.empty()) {
      *why = {job.id, Reason::kQuota, quota_why};
      return;
    }
    bool any_type = false;
    for (int node = 0; node < static_cast<int>(c_.nodes.size()) && !any_type; ++node) {
      NodeFree cap = c_.capacity(node);
      any_type = node_allowed(c_, node, job) && fit_on_node(c_, node, cap, job.request).has_value();
    }
    if (!any_type) {
      *why = {job.id, Reason::kNoGpuType,
              fmt::format("no node of an allowed GPU type can hold one replica ({})", request_text(job.request))};
      return;
    }
    int fit = count_fitting(c_, free_, job, job.min_replicas);
    if (fit >= job.min_replicas) {
      if (restricted) {
        *why = {job.id, Reason::kReserved,
                fmt::format("starting now would delay reserved job '{}' (expected to start at t={:g})",
                            reserved_name_, plan_.reserved_start)};
      } else {
        *why = {job.id, Reason::kTopology,
                fmt::format("{} replicas fit in the cluster but no single {} has room for all of them",
                            job.min_replicas, level_name(job.topology))};
      }
    } else if (job.min_replicas == 1) {
      *why = {job.id, Reason::kResources, fmt::format("no node has room for one replica ({})", request_text(job.request))};
    } else {
      *why = {job.id, Reason::kGang, fmt::format("gang of {} replicas ({} each) does not fit: only {} fit now",
                                                 job.min_replicas, request_text(job.request), fit)};
    }
  }

  // Preemption cost order: shrinking an elastic job first, then whole jobs by priority, then by
  // the GPU work they would lose, the most recently started first.
  // Who may be a victim (Kueue's withinClusterQueue: LowerPriority, reclaimWithinCohort: Any,
  // borrowWithinCohort: Never): a lower-priority job of the same queue or of a queue without
  // a quota; and, when the job fits within its own queue's nominal quota, any job of a
  // borrowing queue of its cohort, while that queue is still borrowing (trial() checks it as
  // it takes them). A job that would borrow takes nothing from another queue with a quota,
  // and work within its queue's nominal quota is never taken by another queue: so what one
  // plan decides, the next does not undo (invariants_test checks that plans settle).
  std::vector<Unit> victims_for(const Job& job) const {
    bool reclaim = quota_.has_quota(job.queue) && quota_.within_nominal(job, job.min_replicas, kNone);
    int cohort = c_.queue_cohort[job.queue];
    std::vector<Unit> shrink;
    std::vector<int> whole;
    for (int i = 0; i < static_cast<int>(state_.running.size()); ++i) {
      const Job& v = state_.running[i].job;
      if (kept_[i] == 0) continue;
      if (policy_.elastic && v.priority <= job.priority) {
        for (int k = kept_[i] - 1; k >= v.min_replicas; --k) shrink.push_back({i, k});
      }
      if (!v.preemptible) continue;
      const bool same_queue = v.queue == job.queue;
      const bool lower = v.priority < job.priority && (same_queue || !quota_.has_quota(v.queue));
      const bool reclaimable = reclaim && cohort != kNone && !same_queue && c_.queue_cohort[v.queue] == cohort &&
                               quota_.borrowing(v.queue);
      if (lower || reclaimable) whole.push_back(i);
    }
    auto lost = [&](int i) {
      const RunningJob& r = state_.running[i];
      return static_cast<double>(r.job.request.gpu_milli_total() + 1) * kept_[i] * (now_ - r.start_time);
    };
    std::sort(whole.begin(), whole.end(), [&](int a, int b) {
      const RunningJob &x = state_.running[a], &y = state_.running[b];
      if (x.job.priority != y.job.priority) return x.job.priority < y.job.priority;
      double la = lost(a), lb = lost(b);
      if (la != lb) return la < lb;
      if (x.start_time != y.start_time) return x.start_time > y.start_time;
      return x.job.id < y.job.id;
    });
    std::vector<Unit> units = shrink;
    for (int i : whole) units.push_back({i, 0, state_.running[i].job.queue != job.queue});
    return units;
  }

  struct Trial {
    std::vector<NodeFree> free;
    QuotaBook quota;
    std::vector<int> kept;
    std::optional<std::vector<Placement>> placed;
  };

  // Takes the chosen units back and tries to place the job on what is then free.
  Trial trial(const Job& job, const std::vector<Unit>& units, const std::vector<char>& chosen) const {
    Trial t{free_, quota_, kept_, std::nullopt};
    for (size_t u = 0; u < units.size(); ++u) {
      if (!chosen[u]) continue;
      int run = units[u].run;
      const RunningJob& r = state_.running[run];
      if (units[u].other_queue && t.quota.guaranteed(r.job.queue)) continue;  // its queue is back within nominal
      for (int k = units[u].target; k < t.kept[run]; ++k) {
        const Placement& p = r.replicas[k];
        apply_placement(t.free[p.node], p, r.job.request, +1);
        t.quota.add(r.job, 1, c_.node_gpu_type[p.node], -1);
      }
      t.kept[run] = std::min(t.kept[run], units[u].target);
    }
    t.placed = place_gang(job, t.free, t.quota, nullptr);
    return t;
  }

  // Finds the cheapest set of victims that lets the job start: the shortest prefix of the
  // cost order that works (binary search: more room never hurts), then gives back every unit
  // the job can do without, the most expensive first.
  std::optional<std::vector<Placement>> preempt_for(const Job& job) {
    std::vector<Unit> units = victims_for(job);
    if (units.empty()) return std::nullopt;
    std::vector<char> chosen(units.size(), 1);
    if (!trial(job, units, chosen).placed) return std::nullopt;
    size_t lo = 1, hi = units.size();
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      std::fill(chosen.begin(), chosen.end(), 0);
      std::fill(chosen.begin(), chosen.begin() + mid, 1);
      if (trial(job, units, chosen).placed) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    std::fill(chosen.begin(), chosen.end(), 0);
    std::fill(chosen.begin(), chosen.begin() + lo, 1);
    for (size_t u = lo; u-- > 0;) {
      chosen[u] = 0;
      if (!trial(job, units, chosen).placed) chosen[u] = 1;
    }
    Trial t = trial(job, units, chosen);
    KOI_CHECK(t.placed.has_value());
    for (int run = 0; run < static_cast<int>(kept_.size()); ++run) {
      if (t.kept[run] == kept_[run]) continue;
      const RunningJob& r = state_.running[run];
      if (t.kept[run] == 0) {
        plan_.decisions.push_back({DecisionKind::kPreempt, r.job.id, {}, job.id});
      } else {
        std::vector<Placement> removed(r.replicas.begin() + t.kept[run], r.replicas.begin() + kept_[run]);
        plan_.decisions.push_back({DecisionKind::kShrink, r.job.id, std::move(removed), job.id});
      }
    }
    free_ = std::move(t.free);
    quota_ = std::move(t.quota);
    kept_ = std::move(t.kept);
    failed_.clear();  // room was freed: earlier failures may now fit
    return t.placed;
  }

  // EASY backfill: the job's earliest start, assuming running jobs end on time, and the nodes
  // it will need then; later jobs may use those nodes only if they end before it.
  void reserve(const Job& job) {
    struct Ending {
      double end;
      const Request* request;
      std::vector<Placement> replicas;
    };
    std::vector<Ending> endings;
    for (size_t i = 0; i < state_.running.size(); ++i) {
      const RunningJob& r = state_.running[i];
      if (r.job.duration < 0 || kept_[i] == 0) continue;
      endings.push_back({r.start_time + r.job.duration, &r.job.request,
                         std::vector<Placement>(r.replicas.begin(), r.replicas.begin() + kept_[i])});
    }
    for (const auto& [j, placements] : admitted_) {
      if (j->duration >= 0) endings.push_back({now_ + j->duration, &j->request, placements});
    }
    std::stable_sort(endings.begin(), endings.end(), [](const Ending& a, const Ending& b) { return a.end < b.end; });
    auto placed_after = [&](size_t k) {
      std::vector<NodeFree> free = free_;
      for (size_t e = 0; e < k; ++e) {
        for (const Placement& p : endings[e].replicas) apply_placement(free[p.node], p, *endings[e].request, +1);
      }
      return try_place(c_, free, job, job.min_replicas, options_);
    };
    plan_.reserved_job = job.id;
    reserved_name_ = job.name;
    plan_.reserved_start = kInfinity;
    if (endings.empty() || !placed_after(endings.size())) return;
    size_t lo = 1, hi = endings.size();
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (placed_after(mid)) {
        hi = mid;
      } else {
        lo = mid + 1;
      }
    }
    plan_.reserved_start = std::max(now_, endings[lo - 1].end);
    std::optional<std::vector<Placement>> at_start = placed_after(lo);
    for (const Placement& p : *at_start) excluded_[p.node] = 1;
    failed_.clear();
  }

  void grow_elastic() {
    std::vector<int> order;
    for (int i = 0; i < static_cast<int>(state_.running.size()); ++i) {
      const RunningJob& r = state_.running[i];
      if (kept_[i] == static_cast<int>(r.replicas.size()) && kept_[i] < r.job.max_replicas) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
      return state_.running[a].job.priority > state_.running[b].job.priority;
    });
    options_.excluded_nodes = plan_.reserved_job != kNone ? &excluded_ : nullptr;
    for (int i : order) {
      const RunningJob& r = state_.running[i];
      std::vector<Placement> extra = place_extra(r.job, kept_[i], r.replicas.empty() ? nullptr : &r.replicas[0]);
      if (!extra.empty()) plan_.decisions.push_back({DecisionKind::kGrow, r.job.id, std::move(extra), kNone});
    }
    options_.excluded_nodes = nullptr;
  }

  const Cluster& c_;
  const ClusterState& state_;
  const std::vector<Job>& pending_;
  double now_;
  const Policy& policy_;
  std::vector<NodeFree> free_;
  QuotaBook quota_;
  std::vector<int> kept_;  // replicas each running job keeps after this round's preemptions
  std::vector<char> excluded_;
  std::vector<WorkloadClass> workload_;
  std::unique_ptr<FragmentationCache> fgd_cache_;
  PlaceOptions options_;
  std::map<std::pair<FailKey, bool>, Explanation> failed_;
  std::vector<std::pair<const Job*, std::vector<Placement>>> admitted_;
  std::vector<const Job*> passed_over_;  // jobs this round could not admit, in order
  std::string reserved_name_;
  Plan plan_;
};

}  // namespace

Plan plan(const ClusterState& state, const std::vector<Job>& pending, double now, const Policy& policy) {
  return Planner(state, pending, now, policy).run();
}

}  // namespace koi::cluster
