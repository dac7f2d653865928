#include "cluster/simulator.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <queue>
#include <unordered_map>

#include "base/check.h"
#include "base/random.h"

namespace koi::cluster {
namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t idx = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size()))) - 1;
  return v[std::min(idx, v.size() - 1)];
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / static_cast<double>(v.size());
}

int64_t allocated_gpu_milli(const ClusterState& state) {
  int64_t used = 0;
  for (const RunningJob& r : state.running) used += r.job.request.gpu_milli_total() * static_cast<int64_t>(r.replicas.size());
  return used;
}

bool fits_empty_cluster(const Cluster& cluster, const Job& job) {
  std::vector<NodeFree> free = make_empty_state(cluster).free;
  PlaceOptions o;
  o.fit = Fit::kFirstFit;
  return try_place(cluster, free, job, job.min_replicas, o).has_value();
}

void downsample(std::vector<std::pair<double, double>>* curve, size_t points) {
  if (points == 0 || curve->size() <= points) return;
  std::vector<std::pair<double, double>> out;
  double step = static_cast<double>(curve->size() - 1) / static_cast<double>(points - 1);
  for (size_t i = 0; i < points; ++i) out.push_back((*curve)[static_cast<size_t>(std::lround(i * step))]);
  *curve = std::move(out);
}

std::vector<QueueResult> queue_results(const Cluster& cluster, const std::vector<double>& gpu,
                                       const std::vector<std::vector<double>>& jct,
                                       const std::vector<std::vector<double>>& ftf) {
  std::vector<QueueResult> out;
  double total = 0;
  for (double g : gpu) total += g;
  for (size_t q = 0; q < cluster.queues.size(); ++q) {
    QueueResult r;
    r.name = cluster.queues[q].name;
    r.finished = static_cast<int>(jct[q].size());
    r.gpu_seconds = gpu[q];
    r.share = total > 0 ? gpu[q] / total : 0;
    r.avg_jct = mean(jct[q]);
    r.avg_ftf = mean(ftf[q]);
    r.max_ftf = ftf[q].empty() ? 0 : *std::max_element(ftf[q].begin(), ftf[q].end());
    out.push_back(std::move(r));
  }
  return out;
}

constexpr int kMaxRoundsPerInstant = 64;

class Replay {
 public:
  Replay(const Cluster& cluster, const SimOptions& options) : c_(cluster), o_(options), state_(make_empty_state(cluster)) {}

  SimResult run(std::vector<Job> jobs, SimResult r) {
    double t0 = jobs.empty() ? 0 : jobs.front().submit_time;
    for (const Job& j : jobs) t0 = std::min(t0, j.submit_time);
    double t1 = t0;
    for (Job& j : jobs) {
      j.submit_time = t0 + (j.submit_time - t0) / o_.arrival_scale;
      t1 = std::max(t1, j.submit_time);
    }
    size_t originals = jobs.size();
    int id_stride = 0;
    for (const Job& j : jobs) id_stride = std::max(id_stride, j.id + 1);
    for (int copy = 1; copy < o_.repeat; ++copy) {
      for (size_t i = 0; i < originals; ++i) {
        Job j = jobs[i];
        j.id += copy * id_stride;
        j.submit_time += copy * (t1 - t0 + 1);
        jobs.push_back(std::move(j));
      }
    }
    r.jobs = static_cast<int>(jobs.size()) + r.unschedulable * o_.repeat;
    r.unschedulable *= o_.repeat;
    std::stable_sort(jobs.begin(), jobs.end(), [](const Job& a, const Job& b) {
      return std::tie(a.submit_time, a.id) < std::tie(b.submit_time, b.id);
    });
    for (const Job& j : jobs) info_[j.id] = Info{.job = j, .work_left = std::max(0.0, j.duration) * j.max_replicas};
    size_t next_arrival = 0;
    double last_t = t0, last_alloc = 0;
    bool last_saturated = false;
    double weighted_alloc = 0, weighted_unalloc = 0;
    int64_t total = c_.total_gpu_milli();
    std::vector<Explanation> last_waiting;
    for (;;) {
      while (!ends_.empty() && stale(ends_.top())) ends_.pop();
      double t = std::numeric_limits<double>::infinity();
      if (next_arrival < jobs.size()) t = jobs[next_arrival].submit_time;
      if (!ends_.empty()) t = std::min(t, ends_.top().time);
      if (std::isinf(t)) break;
      weighted_alloc += last_alloc * (t - last_t);
      if (last_saturated) {
        weighted_unalloc += (1 - last_alloc) * (t - last_t);
        r.saturated_seconds += t - last_t;
      }
      last_t = t;
      while (!ends_.empty() && (stale(ends_.top()) || ends_.top().time <= t)) {
        End e = ends_.top();
        ends_.pop();
        if (!stale(e)) finish(e.job_id, t);
      }
      while (next_arrival < jobs.size() && jobs[next_arrival].submit_time <= t) add_pending(jobs[next_arrival++]);
      Plan p = plan(state_, pending_, t, o_.policy);
      apply(p, t, &r);
      if (o_.record_decisions) record(p, t, &r);
      if (o_.on_step) o_.on_step(state_, p);
      // The control plane plans again in its next round, at once, on the state this plan
      // left: a preempted victim, requeued, may start elsewhere (by preempting lower-priority
      // work in turn), a reservation may move. So does the replay, at the same instant, until
      // a plan decides nothing. A scheduler whose plans undo each other would never settle:
      // counted, not looped on.
      for (int round = 1; !p.decisions.empty(); ++round) {
        if (round == kMaxRoundsPerInstant) {
          ++r.unstable_instants;
          break;
        }
        p = plan(state_, pending_, t, o_.policy);
        apply(p, t, &r);
        if (o_.record_decisions) record(p, t, &r);
        if (o_.on_step) o_.on_step(state_, p);
      }
      last_alloc = total > 0 ? static_cast<double>(allocated_gpu_milli(state_)) / static_cast<double>(total) : 0;
      last_saturated = false;
      for (const Explanation& w : p.waiting) {
        if (w.reason != Reason::kQuota && info_[w.job_id].job.request.gpus > 0) last_saturated = true;
      }
      r.curve.push_back({t - t0, last_alloc});
      last_waiting = std::move(p.waiting);
    }
    std::vector<double> jct, queueing;
    std::vector<double> gpu(c_.queues.size(), 0);
    std::vector<std::vector<double>> q_jct(c_.queues.size()), q_ftf(c_.queues.size());
    double last_finish = t0;
    for (const auto& [id, info] : info_) {
      gpu[info.job.queue] += info.gpu_seconds;
      if (info.finish < 0) continue;
      double j = info.finish - info.job.submit_time;
      jct.push_back(j);
      queueing.push_back(info.first_start - info.job.submit_time);
      q_jct[info.job.queue].push_back(j);
      if (info.job.duration >= 1) q_ftf[info.job.queue].push_back(j / info.job.duration);
      last_finish = std::max(last_finish, info.finish);
    }
    r.finished = static_cast<int>(jct.size());
    r.unfinished = static_cast<int>(jobs.size()) - r.finished;
    r.avg_jct = mean(jct);
    r.p99_jct = percentile(jct, 0.99);
    r.avg_queueing = mean(queueing);
    r.p99_queueing = percentile(queueing, 0.99);
    r.makespan = last_finish - t0;
    double span = last_t - t0;
    r.avg_allocation = span > 0 ? weighted_alloc / span : last_alloc;
    r.unallocated_at_saturation = r.saturated_seconds > 0 ? weighted_unalloc / r.saturated_seconds : 0;
    r.queues = queue_results(c_, gpu, q_jct, q_ftf);
    for (size_t i = 0; i < last_waiting.size() && i < 20; ++i) {
      const Explanation& w = last_waiting[i];
      r.waiting.push_back(fmt::format("{}: {}: {}", info_[w.job_id].job.name, reason_name(w.reason), w.message));
    }
    return r;
  }

 private:
  struct Info {
    Job job;
    double work_left = 0;   // replica-seconds
    double since = 0;       // when work_left was last brought up to date
    int replicas = 0;       // running now
    double first_start = -1;
    double finish = -1;
    double gpu_seconds = 0;
    int version = 0;        // bumps on every change that moves the end time
  };
  struct End {
    double time;
    int job_id;
    int version;
    bool operator>(const End& o) const { return std::tie(time, job_id) > std::tie(o.time, o.job_id); }
  };

  bool stale(const End& e) const { return info_.at(e.job_id).version != e.version; }

  void add_pending(const Job& j) {
    pending_index_[j.id] = pending_.size();
    pending_.push_back(j);
  }

  void remove_pending(int id) {
    size_t idx = pending_index_.at(id);
    pending_index_.erase(id);
    if (idx + 1 != pending_.size()) {
      pending_[idx] = std::move(pending_.back());
      pending_index_[pending_[idx].id] = idx;
    }
    pending_.pop_back();
  }

  // Brings a running job's progress to t and sets its replica count, rescheduling its end.
  void set_replicas(Info& info, int replicas, double t) {
    if (info.replicas > 0) {
      double dt = t - info.since;
      info.work_left = std::max(0.0, info.work_left - dt * info.replicas);
      info.gpu_seconds += dt * info.replicas * static_cast<double>(info.job.request.gpu_milli_total()) / kGpuMilli;
    }
    info.since = t;
    info.replicas = replicas;
    ++info.version;
    if (replicas > 0 && info.job.duration >= 0) ends_.push({t + info.work_left / replicas, info.job.id, info.version});
  }

  void finish(int id, double t) {
    Info& info = info_.at(id);
    set_replicas(info, 0, t);
    info.finish = t;
    apply_decision(state_, Decision{DecisionKind::kPreempt, id, {}, kNone}, nullptr, t);
  }

  // Adds the plan's admissions and preemptions to the instant's step.
  void record(const Plan& p, double t, SimResult* r) const {
    SimStep step;
    if (!r->decisions.empty() && r->decisions.back().time == t) {
      step = std::move(r->decisions.back());
      r->decisions.pop_back();
    }
    step.time = t;
    for (const Decision& d : p.decisions) {
      if (d.kind == DecisionKind::kAdmit) step.admitted.push_back(info_.at(d.job_id).job.name);
      if (d.kind == DecisionKind::kPreempt) step.preempted.push_back(info_.at(d.job_id).job.name);
    }
    if (step.admitted.empty() && step.preempted.empty()) return;
    std::sort(step.admitted.begin(), step.admitted.end());
    std::sort(step.preempted.begin(), step.preempted.end());
    r->decisions.push_back(std::move(step));
  }

  void apply(const Plan& p, double t, SimResult* r) {
    for (const Decision& d : p.decisions) {
      Info& info = info_.at(d.job_id);
      switch (d.kind) {
        case DecisionKind::kAdmit:
          apply_decision(state_, d, &pending_[pending_index_.at(d.job_id)], t);
          remove_pending(d.job_id);
          if (info.first_start < 0) info.first_start = t;
          set_replicas(info, static_cast<int>(d.placements.size()), t);
          break;
        case DecisionKind::kPreempt: {
          apply_decision(state_, d, nullptr, t);
          set_replicas(info, 0, t);
          info.work_left = std::max(0.0, info.job.duration) * info.job.max_replicas;
          Job again = info.job;
          again.preempted_by = info_.at(d.by_job).job.name;
          info.job.preempted_by = again.preempted_by;
          add_pending(again);
          ++r->preemptions;
          break;
        }
        case DecisionKind::kShrink:
          apply_decision(state_, d, nullptr, t);
          set_replicas(info, info.replicas - static_cast<int>(d.placements.size()), t);
          break;
        case DecisionKind::kGrow:
          apply_decision(state_, d, nullptr, t);
          set_replicas(info, info.replicas + static_cast<int>(d.placements.size()), t);
          break;
      }
    }
  }

  const Cluster& c_;
  const SimOptions& o_;
  ClusterState state_;
  std::vector<Job> pending_;
  std::unordered_map<int, size_t> pending_index_;
  std::map<int, Info> info_;
  std::priority_queue<End, std::vector<End>, std::greater<End>> ends_;
};

SimResult fill(const Cluster& c, const std::vector<Job>& jobs, const SimOptions& o, SimResult r) {
  ClusterState state = make_empty_state(c);
  Rng rng(o.seed);
  double total = static_cast<double>(c.total_gpu_milli());
  double arrived = 0;
  bool full_recorded = false;
  std::vector<double> gpu(c.queues.size(), 0);
  int next_id = 0;
  std::vector<Job> one(1);
  // Only GPU demand advances the fill; a workload without any would never reach the limit.
  bool any_gpu = std::any_of(jobs.begin(), jobs.end(), [](const Job& j) { return j.request.gpus > 0; });
  while (any_gpu && total > 0 && arrived < o.fill_limit * total) {
    one[0] = jobs[rng.below(jobs.size())];
    one[0].id = next_id++;
    arrived += static_cast<double>(one[0].request.gpu_milli_total() * one[0].min_replicas);
    Plan p = plan(state, one, 0, o.policy);
    if (p.decisions.empty()) {
      if (r.failed++ == 0) r.first_failure_arrived = arrived / total;
    }
    for (const Decision& d : p.decisions) {
      KOI_CHECK(d.kind == DecisionKind::kAdmit);  // fill runs without preemption (see simulate)
      apply_decision(state, d, &one[0], 0);
      gpu[one[0].queue] += static_cast<double>(one[0].request.gpu_milli_total() * d.placements.size()) / kGpuMilli;
    }
    if (o.on_step) o.on_step(state, p);
    double alloc = static_cast<double>(allocated_gpu_milli(state)) / total;
    if (!full_recorded && arrived >= total) {
      r.unallocated_at_full = 1 - alloc;
      full_recorded = true;
    }
    r.curve.push_back({arrived / total, alloc});
    r.allocation_at_end = alloc;
  }
  r.finished = next_id - r.failed;
  std::vector<std::vector<double>> none(c.queues.size());
  r.queues = queue_results(c, gpu, none, none);
  return r;
}

}  // namespace

Result<SimResult> simulate(const Cluster& cluster, const std::vector<Job>& jobs, const SimOptions& options) {
  if (options.arrival_scale <= 0) return Status::invalid_argument("arrival scale must be > 0");
  if (options.fill_limit <= 0) return Status::invalid_argument("fill limit must be > 0");
  if (options.repeat < 1) return Status::invalid_argument("repeat must be >= 1");
  SimOptions o = options;
  std::vector<Job> runnable;
  SimResult r;
  r.policy = o.policy.name;
  r.mode = o.mode == SimMode::kReplay ? "replay" : "fill";
  r.jobs = static_cast<int>(jobs.size());
  for (const Job& j : jobs) {
    if (o.mode == SimMode::kReplay && j.duration < 0) {
      return Status::invalid_argument(fmt::format("job '{}' has no duration; a replay needs run times (use fill mode)", j.name));
    }
    if (fits_empty_cluster(cluster, j)) {
      runnable.push_back(j);
    } else {
      ++r.unschedulable;
    }
  }
  if (o.policy.workload.empty()) o.policy.workload = workload_of(runnable);
  if (o.mode == SimMode::kFill) {
    // The fill measures placement alone: tasks never leave, so nothing is preempted or resized.
    o.policy.preemption = false;
    o.policy.elastic = false;
    r = fill(cluster, runnable, o, std::move(r));
  } else {
    r = Replay(cluster, o).run(std::move(runnable), std::move(r));
  }
  downsample(&r.curve, o.curve_points);
  return r;
}

}  // namespace koi::cluster
