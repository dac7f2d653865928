#include "cluster/control_plane/reconciler.h"

#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <cstring>
#include <fstream>
#include <set>

#include "base/file.h"
#include "base/logging.h"
#include "cluster/control_plane/train_pace.h"
#include "cluster/control_plane/watchdog_report.h"
#include "cluster/quota.h"
#include "process/proc_stat.h"
#include "process/process.h"

namespace koi::cluster {
namespace {

constexpr double kLaunchRetrySeconds = 5;
constexpr int64_t kLogTailBytes = 2048;
// Where a watchdog report is looked for: mpirun's notice of the abort follows it (about 1 KiB).
constexpr int64_t kWatchdogTailBytes = 16 << 10;
constexpr char kWatchdogHint[] =
    " (a rank not responding is stopped, hung or much slower: look at its stack, py-spy dump or gdb -p)";

bool pending_like(JobPhase p) {
  return p == JobPhase::kPending || p == JobPhase::kPreempted || p == JobPhase::kRestarting;
}

bool contains(const std::vector<int64_t>& v, int x) { return std::find(v.begin(), v.end(), x) != v.end(); }

double mtime(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return 0;
  return static_cast<double>(st.st_mtim.tv_sec) + st.st_mtim.tv_nsec * 1e-9;
}

std::string job_key(const JobObject& job) { return job.metadata.ns + "/" + job.metadata.name; }

}  // namespace

Reconciler::Reconciler(StateStore& store, Executor& executor, Cluster cluster, metrics::Registry& registry,
                       ReconcilerOptions options)
    : store_(store), executor_(executor), cluster_(std::move(cluster)), registry_(registry), options_(std::move(options)) {
  published_ = std::make_shared<const Cluster>(cluster_);
  registry_.gauge("koi_cluster_queue_pending_jobs", "Jobs waiting in each queue (Pending, Preempted, Restarting)", {"queue"});
  registry_.gauge("koi_cluster_queue_running_jobs", "Jobs holding resources in each queue (Admitted, Running)", {"queue"});
  registry_.counter("koi_cluster_admissions_total", "Jobs admitted by plan() and launched, by queue", {"queue"});
  registry_.counter("koi_cluster_preemptions_total", "Jobs preempted by plan(), by the victim's queue", {"queue"});
  registry_.counter("koi_cluster_restarts_total",
                    "Job restarts by cause (failure spends the budget; the others do not)", {"cause"});
  registry_.counter("koi_cluster_jobs_finished_total", "Jobs that reached a final phase", {"phase"});
  registry_.gauge("koi_cluster_admission_paused", "1 while an admin has paused admissions (koi cluster pause)", {});
  registry_.histogram("koi_cluster_reconcile_seconds", "Duration of one reconcile round", {},
                      {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5});
  declare_node_usage_metrics(registry_);
}

Reconciler::~Reconciler() { stop(); }

void Reconciler::event(std::vector<Event>& events, const JobObject& job, const std::string& type,
                       const std::string& reason, const std::string& message, double now) {
  Event e;
  e.ns = job.metadata.ns, e.name = job.metadata.name, e.time = now, e.type = type, e.reason = reason, e.message = message;
  events.push_back(std::move(e));
}

void Reconciler::transition(JobObject& job, JobPhase phase, const std::string& reason, const std::string& message,
                            double now, std::vector<Event>& events, const std::string& event_type) {
  JobStatus& st = job.status;
  const JobPhase from = st.phase;
  st.phase = phase;
  st.reason = reason;
  st.message = message;
  const std::string type(phase_name(phase));
  auto it = std::find_if(st.conditions.begin(), st.conditions.end(), [&](const Condition& c) { return c.type == type; });
  if (it == st.conditions.end()) {
    Condition c;
    c.type = type;
    it = st.conditions.insert(st.conditions.end(), std::move(c));
  }
  it->status = "True", it->reason = reason, it->message = message, it->last_transition_time = rfc3339(now);
  event(events, job, event_type, reason, fmt::format("{} -> {}: {}", phase_name(from), type, message), now);
  if (is_terminal(phase)) {
    st.finish_time = now;
    registry_.add("koi_cluster_jobs_finished_total", {{"phase", type}});
  }
}

Status Reconciler::commit(JobObject& job, std::vector<Event> events) {
  Status s = store_.update_job(&job, events);
  if (!s.ok()) stale_.insert(job_key(job));
  if (s.code() != StatusCode::kFailedPrecondition) return s;
  // The API changed the object meanwhile (only metadata: a cancel, labels). Status is ours
  // alone: take the fresh metadata and spec, keep the status computed here, write again.
  KOI_ASSIGN_OR_RETURN(std::optional<JobObject> fresh, store_.get_job(job.metadata.ns, job.metadata.name));
  if (!fresh) return Status::not_found("job " + job_key(job) + " disappeared");
  fresh->status = job.status;
  job = std::move(*fresh);
  s = store_.update_job(&job, events);
  if (s.ok()) stale_.erase(job_key(job));
  return s;
}

Result<std::vector<JobObject>> Reconciler::active_jobs() {
  KOI_ASSIGN_OR_RETURN(std::vector<StateStore::Version> versions, store_.active_job_versions());
  const auto fresh = [&](const StateStore::Version& v, std::map<std::string, JobObject>::iterator* it) {
    const std::string key = v.ns + "/" + v.name;
    *it = jobs_.find(key);
    return *it != jobs_.end() && (*it)->second.metadata.resource_version == v.resource_version && !stale_.count(key);
  };
  size_t changed = 0;
  for (const StateStore::Version& v : versions) {
    std::map<std::string, JobObject>::iterator it;
    changed += !fresh(v, &it);
  }
  std::vector<JobObject> out;
  if (changed > versions.size() / 4 + 16) {
    KOI_ASSIGN_OR_RETURN(out, store_.list_jobs("", true));  // many changed (a start, a burst of submits): one read
  } else {
    out.reserve(versions.size());
    for (const StateStore::Version& v : versions) {
      std::map<std::string, JobObject>::iterator it;
      if (fresh(v, &it)) {
        out.push_back(std::move(it->second));
        continue;
      }
      KOI_ASSIGN_OR_RETURN(std::optional<JobObject> job, store_.get_job(v.ns, v.name));
      if (job && !is_terminal(job->status.phase)) out.push_back(std::move(*job));
    }
    // list_jobs' order: submission order (plan()'s FIFO ties are broken by it).
    std::stable_sort(out.begin(), out.end(), [](const JobObject& a, const JobObject& b) {
      return a.metadata.creation_time < b.metadata.creation_time;
    });
  }
  jobs_.clear();
  stale_.clear();
  return out;
}

void Reconciler::keep_jobs(std::vector<JobObject>& jobs) {
  for (JobObject& job : jobs) {
    if (!is_terminal(job.status.phase)) jobs_[job_key(job)] = std::move(job);
  }
}

std::string job_checkpoint_dir(const std::string& work_dir, const JobObject& job) {
  if (!job.spec.checkpoint_dir.empty()) return job.spec.checkpoint_dir;
  return path_join(path_join(path_join(work_dir, job.metadata.ns), job.metadata.name), "checkpoints");
}

std::string Reconciler::checkpoint_dir(const JobObject& job) const { return job_checkpoint_dir(options_.work_dir, job); }

std::string replica_dir(const std::string& work_dir, const std::string& ns, const std::string& name, int attempt,
                        int replica) {
  return fmt::format("{}/{}/{}/{}/{}", work_dir, ns, name, attempt, replica);
}

namespace {

constexpr int kLogTailLines = 10;  // of a diagnosis's message

// The last `n` lines of `text` (without a trailing newline).
std::string last_lines(const std::string& text, int n) {
  size_t end = text.size();
  while (end > 0 && text[end - 1] == '\n') --end;
  size_t begin = end;
  int lines = 0;
  while (begin > 0) {
    if (text[begin - 1] == '\n' && ++lines == n) break;
    --begin;
  }
  return text.substr(begin, end - begin);
}

// "replica 0 exited with status 3", "replica 0 killed by signal 11 (SIGSEGV: Segmentation
// fault)"; an OOM kill says so, with the limit, the peak and a hint.
std::string failure_message(const JobObject& job, const ReplicaRecord& r, size_t index) {
  process::ExitStatus e;
  e.code = r.exit_code, e.signal = r.signal;
  if (r.signal != 0 && !r.oom_killed) {
    return fmt::format("replica {} killed by signal {} ({}: {})", index, r.signal, process::signal_name(r.signal),
                       ::strsignal(r.signal));
  }
  if (!r.oom_killed) return fmt::format("replica {} {}", index, e.describe());
  return fmt::format("replica {} was killed by the kernel's OOM killer at its memory limit of {} MiB (peak {:.1f} MiB): "
                     "raise spec.resources.memoryMiB or make the job use less",
                     index, job.spec.resources.memory_mib, static_cast<double>(r.peak_memory_bytes) / (1 << 20));
}

}  // namespace

bool Reconciler::poll_replicas(JobObject& job) {
  bool all_ended = true;
  for (ReplicaRecord& r : job.status.replicas) {
    if (r.exited || r.lost) continue;
    const ReplicaStatus s = executor_.status(ReplicaHandle{r.id, r.dir});
    if (s.state == ReplicaState::kRunning) {
      all_ended = false;
    } else if (s.state == ReplicaState::kExited) {
      r.exited = true, r.exit_code = s.exit_code, r.signal = s.signal;
      r.oom_killed = s.oom_killed, r.peak_memory_bytes = s.peak_memory_bytes;
    } else {
      r.lost = true;
      r.lost_detail = s.detail;
    }
  }
  return all_ended;
}

std::string Reconciler::log_tail(const JobObject& job, int64_t max_bytes) const {
  for (const ReplicaRecord& r : job.status.replicas) {
    if (r.exited && (r.exit_code != 0 || r.signal != 0)) {
      auto text = executor_.logs(ReplicaHandle{r.id, r.dir}, -max_bytes, max_bytes);
      if (text.ok()) return *text;
    }
  }
  if (job.status.replicas.empty()) return "";
  const ReplicaRecord& r = job.status.replicas[0];
  auto text = executor_.logs(ReplicaHandle{r.id, r.dir}, -max_bytes, max_bytes);
  return text.ok() ? *text : "";
}

void Reconciler::diagnose(JobObject& job, const std::string& code, const std::string& message, double now,
                          std::vector<Event>& events) {
  std::vector<Condition>& conds = job.status.conditions;
  auto it = std::find_if(conds.begin(), conds.end(), [&](const Condition& c) { return c.type == code; });
  if (it == conds.end()) it = conds.insert(conds.end(), Condition{code, "True", code, "", ""});
  it->status = "True", it->reason = code, it->message = message, it->last_transition_time = rfc3339(now);
  event(events, job, "Warning", code, message, now);
}

std::string Reconciler::hang_cause(const JobObject& job) const {
  std::vector<std::string> stopped;
  std::set<std::string> seen;  // an MPI gang's replicas share one launch
  for (const ReplicaRecord& r : job.status.replicas) {
    if (r.exited || r.lost || !seen.insert(r.id).second) continue;
    for (const process::StoppedProcess& p : executor_.stopped(ReplicaHandle{r.id, r.dir})) {
      stopped.push_back(process::describe(p));
    }
  }
  // The trainer's own report, when its watchdog has fired: the collective and the silent ranks.
  const std::optional<std::string> report = find_watchdog_report(log_tail(job, kWatchdogTailBytes));
  const std::string reported = report ? "; the trainer's " + *report : "";
  if (!stopped.empty()) {
    std::string names;
    for (const std::string& n : stopped) names += (names.empty() ? "" : ", ") + n;
    return fmt::format("{} {} stopped (SIGSTOP or SIGTSTP): continue it (SIGCONT) or find who stopped it{}", names,
                       stopped.size() == 1 ? "is" : "are", reported);
  }
  if (report) return "the trainer's " + *report + kWatchdogHint;
  const std::string tail = last_lines(log_tail(job, kLogTailBytes), kLogTailLines);
  return "no process is stopped (a deadlock or a hung collective?); the last lines of its log:\n" + tail;
}

namespace {

// The last `max_bytes` of the file at `path` ("" when it cannot be read).
std::string file_tail(const std::string& path, int64_t max_bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  const int64_t n = std::min(size, max_bytes);
  std::string out(static_cast<size_t>(std::max<int64_t>(n, 0)), '\0');
  f.seekg(size - n);
  f.read(out.data(), n);
  out.resize(static_cast<size_t>(f.gcount()));
  return out;
}

// Whether `code` was diagnosed in this attempt with a message starting with `prefix`.
bool diagnosed(const JobStatus& st, const std::string& code, const std::string& prefix) {
  return std::any_of(st.conditions.begin(), st.conditions.end(), [&](const Condition& c) {
    return c.type == code && c.status == "True" && c.message.starts_with(prefix);
  });
}

}  // namespace

void Reconciler::judge_pace(JobObject& job, double now, std::vector<Event>& events) {
  if (job.spec.kind != JobKind::kTrain && job.spec.kind != JobKind::kFinetune) return;
  const std::vector<StepPace> steps =
      parse_pace(file_tail(path_join(checkpoint_dir(job), "metrics.jsonl"), kPaceTailBytes));
  const std::string attempt = fmt::format("attempt {}: ", job.status.attempts);
  if (const std::optional<Straggler> s = find_straggler(steps)) {
    const std::string prefix = attempt + fmt::format("rank {} ", s->rank);
    if (!diagnosed(job.status, "Straggler", prefix)) diagnose(job, "Straggler", attempt + s->message(), now, events);
  }
  if (const std::optional<Slowdown> s = find_slowdown(steps)) {
    if (!diagnosed(job.status, "SlowProgress", attempt)) diagnose(job, "SlowProgress", attempt + s->message(), now, events);
  }
}

double Reconciler::last_progress(const JobObject& job) const {
  double t = mtime(path_join(checkpoint_dir(job), "metrics.jsonl"));
  for (const ReplicaRecord& r : job.status.replicas) t = std::max(t, mtime(path_join(r.dir, "log")));
  return t;
}

void Reconciler::begin_stop(JobObject& job, const std::string& cause, const std::string& message, double now,
                            std::vector<Event>& events) {
  JobStatus& st = job.status;
  if (!st.terminating.empty()) return;
  st.terminating = cause;
  st.terminating_message = message;
  st.kill_time = now + job.spec.termination_grace_seconds;
  const int sig = job.spec.termination_grace_seconds > 0 ? SIGTERM : SIGKILL;
  st.killed = sig == SIGKILL;
  int signalled = 0;
  std::set<std::string> sent;  // the replicas of an MPI gang share one launch
  for (const ReplicaRecord& r : st.replicas) {
    if (r.exited || r.lost || !sent.insert(r.id).second) continue;
    (void)executor_.signal(ReplicaHandle{r.id, r.dir}, sig);
    // A stopped (SIGSTOP) process acts on SIGTERM only once continued, as Slurm does it.
    if (sig == SIGTERM) (void)executor_.signal(ReplicaHandle{r.id, r.dir}, SIGCONT);
    ++signalled;
  }
  if (signalled == 0) return;  // nothing left to stop: the outcome is the next event
  event(events, job, cause == "Cancelled" || cause == "Preempted" ? "Normal" : "Warning", "Stopping",
        fmt::format("{}: {}; {} sent, SIGKILL after {:g}s", cause, message, sig == SIGTERM ? "SIGTERM" : "SIGKILL",
                    job.spec.termination_grace_seconds),
        now);
}

void Reconciler::handle_failure(JobObject& job, int exit_code, int signal, const std::string& detail, double now,
                                std::vector<Event>& events) {
  JobStatus& st = job.status;
  const RestartPolicy& rp = job.spec.restart;
  st.log_tail = log_tail(job, kLogTailBytes);
  if (signal == 0 && contains(rp.never_retry_exit_codes, exit_code)) {
    transition(job, JobPhase::kFailed, "NeverRetryExitCode",
               fmt::format("{}; exit code {} is in neverRetryExitCodes", detail, exit_code), now, events, "Warning");
    return;
  }
  if (signal == 0 && contains(rp.retry_exit_codes, exit_code)) {
    st.infra_restarts++;
    st.next_attempt_time = now + rp.backoff_seconds;
    registry_.add("koi_cluster_restarts_total", {{"cause", "retry_exit_code"}});
    transition(job, JobPhase::kRestarting, "RetryExitCode",
               fmt::format("{}; exit code {} is in retryExitCodes: restart in {:g}s, budget untouched", detail,
                           exit_code, rp.backoff_seconds),
               now, events, "Warning");
    return;
  }
  if (st.restarts < rp.max_restarts) {
    st.restarts++;
    const double delay =
        std::min(rp.max_backoff_seconds, rp.backoff_seconds * std::pow(2.0, static_cast<double>(st.restarts - 1)));
    st.next_attempt_time = now + delay;
    registry_.add("koi_cluster_restarts_total", {{"cause", "failure"}});
    transition(job, JobPhase::kRestarting, "BackoffRestart",
               fmt::format("{}; restart {} of {} in {:g}s", detail, st.restarts, rp.max_restarts, delay), now, events,
               "Warning");
    return;
  }
  transition(job, JobPhase::kFailed, "RestartBudgetExhausted",
             fmt::format("{}; restart budget spent ({} of maxRestarts {})", detail, st.restarts, rp.max_restarts), now,
             events, "Warning");
}

void Reconciler::finish_stop(JobObject& job, double now, std::vector<Event>& events) {
  JobStatus& st = job.status;
  const std::string cause = st.terminating, message = st.terminating_message;
  if (cause == "Cancelled") {
    transition(job, JobPhase::kCancelled, "Cancelled", message, now, events);
  } else if (cause == "DeadlineExceeded") {
    st.log_tail = log_tail(job, kLogTailBytes);
    transition(job, JobPhase::kFailed, "DeadlineExceeded", message, now, events, "Warning");
  } else if (cause == "Preempted") {
    st.infra_restarts++;
    registry_.add("koi_cluster_restarts_total", {{"cause", "preempted"}});
    transition(job, JobPhase::kPreempted, "Preempted", message + "; requeued, resumes from its checkpoint", now,
               events);
  } else if (cause == "Lost") {
    st.infra_restarts++;
    st.next_attempt_time = now;
    registry_.add("koi_cluster_restarts_total", {{"cause", "lost"}});
    transition(job, JobPhase::kRestarting, "ReplicaLost", message + "; requeued, budget untouched", now, events,
               "Warning");
  } else {  // ReplicaFailed, Hung
    handle_failure(job, st.last_exit_code.value_or(0), st.last_signal.value_or(0), message, now, events);
  }
  st.terminating.clear();
  st.terminating_message.clear();
  st.kill_time = 0;
  st.killed = false;
  st.replicas.clear();
}

Status Reconciler::launch(JobObject& job, const std::vector<Placement>& placements, double now) {
  JobStatus& st = job.status;
  std::vector<Event> events;
  st.attempts++;
  st.replicas.clear();
  std::string where;
  for (size_t i = 0; i < placements.size(); ++i) {
    ReplicaRecord r;
    r.node = placements[i].node;
    for (int g = 0; g < kMaxGpusPerNode; ++g) {
      if (placements[i].gpu_mask & (1u << g)) r.gpus.push_back(g);
    }
    r.dir = replica_dir(options_.work_dir, job.metadata.ns, job.metadata.name, st.attempts, static_cast<int>(i));
    std::string gpus;
    for (int g : r.gpus) gpus += (gpus.empty() ? "" : ",") + std::to_string(g);
    where += fmt::format("{}{}{}", where.empty() ? "" : ", ", cluster_.nodes[r.node].name,
                         gpus.empty() ? "" : " (GPUs " + gpus + ")");
    st.replicas.push_back(std::move(r));
  }
  transition(job, JobPhase::kAdmitted, "Admitted",
             fmt::format("attempt {}: {} replica(s) placed on {}", st.attempts, placements.size(), where), now, events);
  KOI_RETURN_IF_ERROR(commit(job, std::move(events)));
  events.clear();

  const bool train = job.spec.kind == JobKind::kTrain || job.spec.kind == JobKind::kFinetune;
  std::vector<std::string> argv;
  if (train) {
    argv = {options_.koi_binary, "train", "--config", job.spec.recipe, "--out", checkpoint_dir(job)};
    argv.insert(argv.end(), job.spec.args.begin(), job.spec.args.end());
    if (st.attempts > 1) argv.push_back("--resume");
  } else if (job.spec.kind == JobKind::kEval && job.spec.command.empty()) {
    argv = {options_.koi_binary, "eval"};
    argv.insert(argv.end(), job.spec.args.begin(), job.spec.args.end());
  } else {
    argv = job.spec.command;
    argv.insert(argv.end(), job.spec.args.begin(), job.spec.args.end());
  }
  std::vector<ReplicaLaunch> gang;
  for (size_t i = 0; i < st.replicas.size(); ++i) {
    ReplicaLaunch l;
    l.argv = argv;
    l.env = job.spec.env;
    l.env["KOI_JOB"] = job_key(job);
    l.env["KOI_REPLICA"] = std::to_string(i);
    l.env["KOI_NUM_REPLICAS"] = std::to_string(st.replicas.size());
    l.env["KOI_ATTEMPT"] = std::to_string(st.attempts);
    l.env["KOI_NODE"] = cluster_.nodes[st.replicas[i].node].name;
    l.env["KOI_CHECKPOINT_DIR"] = checkpoint_dir(job);
    l.dir = st.replicas[i].dir;
    l.node = st.replicas[i].node;
    l.node_name = cluster_.nodes[l.node].name;
    l.gpus = st.replicas[i].gpus;
    l.memory_mib = job.spec.resources.memory_mib;
    l.cpu_milli = job.spec.resources.cpu_milli;
    l.mpi = train;
    gang.push_back(std::move(l));
  }
  auto handles = executor_.launch(gang);
  if (!handles.ok()) {
    st.replicas.clear();
    st.infra_restarts++;
    st.next_attempt_time = now + kLaunchRetrySeconds;
    registry_.add("koi_cluster_restarts_total", {{"cause", "launch_failed"}});
    transition(job, JobPhase::kRestarting, "LaunchFailed",
               handles.status().message() + fmt::format("; retry in {:g}s, budget untouched", kLaunchRetrySeconds), now,
               events, "Warning");
    return commit(job, std::move(events));
  }
  std::string ids;
  for (size_t i = 0; i < handles->size(); ++i) {
    st.replicas[i].id = (*handles)[i].id;
    st.replicas[i].dir = (*handles)[i].dir;
    if (i == 0 || (*handles)[i].id != (*handles)[i - 1].id) ids += (ids.empty() ? "" : ", ") + (*handles)[i].id;
  }
  st.start_time = now;
  st.next_attempt_time = 0;
  registry_.add("koi_cluster_admissions_total", {{"queue", job.spec.queue}});
  transition(job, JobPhase::kRunning, "Started",
             fmt::format("{} replica(s) started by the {} executor ({}){}", st.replicas.size(), executor_.name(), ids,
                         train && st.attempts > 1 ? "; resuming from the newest checkpoint" : ""),
             now, events);
  return commit(job, std::move(events));
}

Job Reconciler::to_scheduler_job(const JobObject& o, int id) const {
  Job j;
  j.id = id;
  j.name = job_key(o);
  j.queue = std::max(0, cluster_.queue_id(o.spec.queue));
  j.priority = o.spec.priority;
  j.request.cpu_milli = o.spec.resources.cpu_milli;
  j.request.memory_mib = o.spec.resources.memory_mib;
  j.request.gpus = o.spec.resources.gpu;
  j.request.gpu_milli = o.spec.resources.gpu_milli;
  j.request.mig_slices = o.spec.resources.mig_slices;
  j.min_replicas = j.max_replicas = o.spec.replicas;
  j.topology = o.spec.topology;
  j.preemptible = o.spec.preemptible;
  j.submit_time = o.metadata.creation_time;
  j.duration = o.spec.max_runtime_seconds > 0 ? o.spec.max_runtime_seconds : -1;
  if (!o.spec.resources.gpu_type.empty()) j.gpu_types.push_back(cluster_.gpu_type_id(o.spec.resources.gpu_type));
  j.preempted_by = o.status.preempted_by;
  return j;
}

Status Reconciler::recover(double now) {
  KOI_ASSIGN_OR_RETURN(std::vector<JobObject> jobs, store_.list_jobs("", true));
  for (JobObject& job : jobs) {
    std::vector<Event> events;
    JobStatus& st = job.status;
    if (st.phase == JobPhase::kAdmitted) {
      // Replicas the interrupted launch may have started are not on the record: ask the
      // executor what runs in their directories and stop it.
      for (const ReplicaRecord& r : st.replicas) {
        if (auto orphan = executor_.find(r.dir)) (void)executor_.stop(*orphan);
      }
      st.replicas.clear();
      st.infra_restarts++;
      st.next_attempt_time = now;
      registry_.add("koi_cluster_restarts_total", {{"cause", "control_plane_restart"}});
      transition(job, JobPhase::kRestarting, "ControlPlaneRestart",
                 "the control plane restarted while launching it; requeued, budget untouched", now, events);
    } else if (st.phase == JobPhase::kRunning) {
      int adopted = 0, gone = 0;
      for (const ReplicaRecord& r : st.replicas) {
        if (r.exited || r.lost) continue;
        executor_.adopt(ReplicaHandle{r.id, r.dir}) ? ++adopted : ++gone;
      }
      event(events, job, "Normal", "Adopted",
            fmt::format("control plane restarted: {} replica(s) still running adopted, {} ended meanwhile", adopted, gone),
            now);
    } else {
      continue;
    }
    KOI_RETURN_IF_ERROR(commit(job, std::move(events)));
  }
  return ok_status();
}

std::set<std::string> Reconciler::waiting_preemptors(const std::vector<JobObject>& jobs) const {
  std::set<std::string> out;
  for (const JobObject& job : jobs) {
    if (pending_like(job.status.phase) && job.status.reason == "Preempting") out.insert(job_key(job));
  }
  return out;
}

// One scheduling pass: the ClusterState of the jobs holding resources, plan() over the
// eligible pending ones (only the `waiting` ones when only_waiting), its decisions applied,
// and (in the full pass) the explanations written. Returns the state after the decisions.
ClusterState Reconciler::schedule(std::vector<JobObject>& jobs, double now, const std::set<std::string>& waiting,
                                  bool only_waiting) {

  // Schedule: everything holding resources is running; everything eligible is pending.
  ClusterState state = make_empty_state(cluster_);
  std::vector<JobObject*> by_id;
  std::vector<Job> pending;
  std::vector<JobObject*> no_queue;
  for (JobObject& job : jobs) {
    const JobStatus& st = job.status;
    const int id = static_cast<int>(by_id.size());
    if ((st.phase == JobPhase::kRunning || st.phase == JobPhase::kAdmitted) && !st.replicas.empty()) {
      Job j = to_scheduler_job(job, id);
      Decision d;
      d.kind = DecisionKind::kAdmit;
      d.job_id = id;
      for (const ReplicaRecord& r : st.replicas) {
        Placement p{.node = r.node};
        for (int g : r.gpus) p.gpu_mask |= 1u << g;
        p.units = j.request.gpus > 0 ? units_per_device(cluster_, r.node, j.request) : 0;
        d.placements.push_back(p);
      }
      if (cluster_.queue_id(job.spec.queue) == kNone) {
        // Its queue left the config: it holds its devices, charged to no queue, until it ends.
        for (const Placement& p : d.placements) apply_placement(state.free[p.node], p, j.request, -1);
        continue;
      }
      apply_decision(state, d, &j, st.start_time);
      by_id.push_back(&job);
    } else if (pending_like(st.phase) && job.metadata.deletion_timestamp.empty() &&
               (st.phase != JobPhase::kRestarting || now >= st.next_attempt_time) &&
               (!only_waiting || waiting.count(job_key(job)))) {
      if (cluster_.queue_id(job.spec.queue) == kNone) {
        no_queue.push_back(&job);  // its queue left the config: it waits, and says so
        continue;
      }
      pending.push_back(to_scheduler_job(job, id));
      by_id.push_back(&job);
    }
  }
  const Plan p = round_paused_ ? Plan{} : plan(state, pending, now, options_.policy);
  // Admissions listed after a preemption may use what the victims hold until they have
  // stopped (plan() frees a victim's resources at once): those wait, named as "Preempting",
  // for a later round. Admissions listed before the first preemption are safe.
  std::map<int, std::vector<std::string>> waiting_for;  // waiting admission -> victims
  std::vector<std::string> victims;
  for (const Decision& d : p.decisions) {
    JobObject& job = *by_id[d.job_id];
    if (d.kind == DecisionKind::kPreempt) {
      const std::string by = d.by_job != kNone ? job_key(*by_id[d.by_job]) : "a higher-priority job";
      victims.push_back(job_key(job));
      if (d.by_job != kNone) waiting_for[d.by_job].push_back(job_key(job));
      if (!job.status.terminating.empty()) continue;
      std::vector<Event> events;
      job.status.preempted_by = by;
      registry_.add("koi_cluster_preemptions_total", {{"queue", job.spec.queue}});
      begin_stop(job, "Preempted", "preempted by " + by, now, events);
      if (poll_replicas(job)) finish_stop(job, now, events);
      if (Status s = commit(job, std::move(events)); !s.ok()) log::warn("preempt {}: {}", job_key(job), s.message());
    } else if (d.kind == DecisionKind::kAdmit) {
      if (!victims.empty()) {
        auto& w = waiting_for[d.job_id];
        if (w.empty()) w = victims;
        continue;
      }
      if (Status s = launch(job, d.placements, now); !s.ok()) log::warn("launch {}: {}", job_key(job), s.message());
      if (job.status.phase == JobPhase::kRunning) {
        auto it = std::find_if(pending.begin(), pending.end(), [&](const Job& j) { return j.id == d.job_id; });
        apply_decision(state, d, &*it, now);
      }
    } else {
      continue;
    }
    if (d.kind == DecisionKind::kPreempt && job.status.phase == JobPhase::kPreempted) {
      apply_decision(state, d, nullptr, now);
    }
  }
  if (only_waiting) return state;
  // Why the others wait, in plan()'s words.
  std::map<int, std::pair<std::string, std::string>> why;
  for (const Explanation& e : p.waiting) why[e.job_id] = {std::string(reason_name(e.reason)), e.message};
  if (round_paused_) {
    for (const Job& j : pending) {
      why[j.id] = {"AdmissionPaused", "an admin paused admissions (koi cluster resume starts them again)"};
    }
  }
  for (const auto& [id, victims] : waiting_for) {
    std::string list;
    for (const std::string& v : victims) list += (list.empty() ? "" : ", ") + v;
    why[id] = {"Preempting", "waiting for preempted jobs to stop: " + list};
  }
  std::vector<std::pair<JobObject*, std::pair<std::string, std::string>>> explained;
  for (const auto& [id, reason_message] : why) explained.push_back({by_id[id], reason_message});
  for (JobObject* job : no_queue) {
    explained.push_back({job, {"NoQueue", "queue " + job->spec.queue + " is not in the cluster's config any more; "
                                           "an admin can declare it again (koi queue apply)"}});
  }
  for (auto& [job_ptr, reason_message] : explained) {
    JobObject& job = *job_ptr;
    if (!pending_like(job.status.phase)) continue;
    const auto& [reason, message] = reason_message;
    if (job.status.reason == reason && job.status.message == message) continue;
    std::vector<Event> events;
    if (job.status.reason != reason) event(events, job, "Normal", "Waiting", reason + ": " + message, now);
    job.status.reason = reason;
    job.status.message = message;
    if (Status s = commit(job, std::move(events)); !s.ok()) log::warn("explain {}: {}", job_key(job), s.message());
  }

  return state;
}

std::shared_ptr<const Cluster> Reconciler::cluster() const {
  std::lock_guard<std::mutex> lock(mu_);
  return published_;
}

void Reconciler::set_queue(const QueueSpec& queue) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<QueueSpec> queues = published_->queues;
    auto it = std::find_if(queues.begin(), queues.end(), [&](const QueueSpec& q) { return q.name == queue.name; });
    if (it == queues.end()) {
      queues.push_back(queue);
    } else {
      *it = queue;
    }
    published_ = std::make_shared<const Cluster>(make_cluster(published_->nodes, std::move(queues)));
    cluster_changed_ = true;
  }
  wake();
}

namespace {

// What plan() may use of the executor's inventory: a node the executor reports down or
// drained keeps its place (replica records name nodes by index) but offers nothing.
std::vector<NodeSpec> schedulable_nodes(std::vector<NodeSpec> nodes) {
  for (NodeSpec& n : nodes) {
    if (n.state.empty()) continue;
    n.cpu_milli = 0, n.memory_mib = 0, n.gpu_count = 0;
  }
  return nodes;
}

}  // namespace

void Reconciler::refresh_inventory(double now) {
  executor_.refresh_inventory();
  for (const auto& [node, samples] : executor_.usage(1)) {
    if (!samples.empty()) export_node_usage(registry_, node, samples.back());
  }
  const std::vector<NodeSpec> reported = executor_.inventory();
  std::vector<NodeSpec> nodes = schedulable_nodes(reported);
  std::vector<const NodeSpec*> changed;  // nodes that stopped or started taking work, for the store
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cluster_changed_) cluster_ = *published_, cluster_changed_ = false;
    const auto same = [](const NodeSpec& a, const NodeSpec& b) {
      return a.name == b.name && a.cpu_milli == b.cpu_milli && a.memory_mib == b.memory_mib &&
             a.gpu_count == b.gpu_count && a.gpu_type == b.gpu_type && a.state == b.state &&
             a.leaf_switch == b.leaf_switch && a.spine == b.spine && a.nvlink_domain == b.nvlink_domain;
    };
    if (nodes.size() == cluster_.nodes.size() && std::equal(nodes.begin(), nodes.end(), cluster_.nodes.begin(), same)) {
      return;
    }
    for (size_t i = 0; i < nodes.size(); ++i) {
      auto old = std::find_if(cluster_.nodes.begin(), cluster_.nodes.end(),
                              [&](const NodeSpec& o) { return o.name == nodes[i].name; });
      if (old == cluster_.nodes.end() || old->state.empty() != nodes[i].state.empty()) changed.push_back(&reported[i]);
    }
    cluster_ = make_cluster(std::move(nodes), cluster_.queues);
    published_ = std::make_shared<const Cluster>(cluster_);
  }
  for (const NodeSpec* n : changed) {
    Event e;
    e.kind = "Node", e.name = n->name, e.time = now;
    e.type = n->state.empty() ? "Normal" : "Warning";
    e.reason = n->state.empty() ? "NodeReady" : "NodeUnschedulable";
    e.message = n->state.empty() ? "the " + executor_.name() + " executor reports it takes work"
                                 : "the " + executor_.name() + " executor reports it " + n->state + "; it takes no new work";
    log::info("node {}: {}", n->name, e.message);
    if (Status s = store_.put_node(*n, e); !s.ok()) log::warn("node {}: {}", n->name, s.message());
  }
}

Status Reconciler::reconcile_once(double now) {
  const auto started = std::chrono::steady_clock::now();
  round_paused_ = paused_.load();
  refresh_inventory(now);
  KOI_ASSIGN_OR_RETURN(std::vector<JobObject> jobs, active_jobs());

  // Watch running work; stop what must stop; heal what stopped.
  for (JobObject& job : jobs) {
    JobStatus& st = job.status;
    const bool cancel = !job.metadata.deletion_timestamp.empty();
    if (!cancel && st.phase != JobPhase::kRunning) continue;  // nothing to watch: no copy to compare
    std::vector<Event> events;
    const std::string before = job_json_text(job);
    if (cancel && pending_like(st.phase)) {
      transition(job, JobPhase::kCancelled, "Cancelled", "cancelled before it started", now, events);
    } else if (st.phase == JobPhase::kRunning) {
      const bool all_ended = poll_replicas(job);
      if (st.terminating.empty()) {
        const ReplicaRecord* failed = nullptr;
        const ReplicaRecord* lost = nullptr;
        for (const ReplicaRecord& r : st.replicas) {
          if (r.lost && !lost) lost = &r;
          if (r.exited && (r.exit_code != 0 || r.signal != 0) && !failed) failed = &r;
        }
        const size_t replica_index = failed ? failed - st.replicas.data() : 0;
        if (cancel) {
          begin_stop(job, "Cancelled", "cancelled by a user", now, events);
        } else if (failed) {
          if (failed->signal != 0) {
            st.last_exit_code.reset();
            st.last_signal = failed->signal;
          } else {
            st.last_exit_code = failed->exit_code;
            st.last_signal.reset();
          }
          const std::string why = failure_message(job, *failed, replica_index);
          begin_stop(job, "ReplicaFailed", why, now, events);
          if (failed->oom_killed) {
            diagnose(job, "OOMKilled", why, now, events);
          } else if (process::is_crash_signal(failed->signal)) {
            diagnose(job, "Crashed",
                     fmt::format("replica {} crashed with {} ({}); the last lines of its log:\n{}", replica_index,
                                 process::signal_name(failed->signal), ::strsignal(failed->signal),
                                 last_lines(log_tail(job, kLogTailBytes), kLogTailLines)),
                     now, events);
          } else if (const std::optional<std::string> report =
                         find_watchdog_report(log_tail(job, kWatchdogTailBytes))) {
            // The trainer's collective watchdog ended the job: a hang it named itself.
            diagnose(job, "Hung", fmt::format("{} after the trainer's {}{}", why, *report, kWatchdogHint), now, events);
          }
        } else if (lost) {
          begin_stop(job, "Lost",
                     fmt::format("replica {} was lost{}", lost - st.replicas.data(),
                                 lost->lost_detail.empty() ? "" : ": " + lost->lost_detail),
                     now, events);
        } else if (all_ended) {
          st.last_exit_code = 0;
          st.last_signal.reset();
          transition(job, JobPhase::kSucceeded, "Completed",
                     fmt::format("all {} replica(s) exited with status 0", st.replicas.size()), now, events);
          st.replicas.clear();
        } else if (job.spec.max_runtime_seconds > 0 && now - st.start_time > job.spec.max_runtime_seconds) {
          begin_stop(job, "DeadlineExceeded",
                     fmt::format("ran longer than maxRuntimeSeconds {:g}", job.spec.max_runtime_seconds), now, events);
        } else if (job.spec.hang_timeout_seconds > 0 &&
                   now - std::max(st.start_time, last_progress(job)) > job.spec.hang_timeout_seconds) {
          st.last_exit_code.reset();
          st.last_signal = SIGKILL;
          const std::string why = fmt::format("no progress (log or metrics.jsonl) for hangTimeoutSeconds {:g}; {}",
                                              job.spec.hang_timeout_seconds, hang_cause(job));
          diagnose(job, "Hung", why, now, events);
          begin_stop(job, "Hung", why, now, events);
        } else {
          judge_pace(job, now, events);
        }
      }
      if (!st.terminating.empty()) {
        if (poll_replicas(job)) {
          finish_stop(job, now, events);
        } else if (!st.killed && now >= st.kill_time) {
          for (const ReplicaRecord& r : st.replicas) {
            if (!r.exited && !r.lost) (void)executor_.stop(ReplicaHandle{r.id, r.dir});
          }
          st.killed = true;
          event(events, job, "Warning", "Killed",
                fmt::format("still running {:g}s after SIGTERM: SIGKILL sent", job.spec.termination_grace_seconds), now);
        }
      }
    }
    if (job_json_text(job) != before) {
      if (Status s = commit(job, std::move(events)); !s.ok()) log::warn("reconcile {}: {}", job_key(job), s.message());
    }
  }

  // A preemptor waiting for its victims to stop gets what they free: while one waits, each
  // round first runs a pass in which only the waiting preemptors may start; a round in which
  // one of them starts ends there, and the others are planned from the next round on. In
  // `koi sim` the preemption and the admission are one decision, so nothing can take the room
  // between them, and the other jobs of that instant were planned with the preemptor placed.
  const std::set<std::string> preemptors = waiting_preemptors(jobs);
  std::optional<ClusterState> after_preemptors;
  if (!preemptors.empty() && !round_paused_) {
    ClusterState s = schedule(jobs, now, preemptors, true);
    for (const JobObject& job : jobs) {
      if (preemptors.count(job_key(job)) && job.status.phase == JobPhase::kRunning) after_preemptors = std::move(s);
      if (after_preemptors) break;
    }
  }
  const ClusterState state = after_preemptors ? std::move(*after_preemptors) : schedule(jobs, now, preemptors, false);

  // Usage against quota and the queue gauges.
  std::vector<QueueUsage> usage;
  QuotaBook book(cluster_, state.running);
  for (size_t q = 0; q < cluster_.queues.size(); ++q) {
    const QueueSpec& spec = cluster_.queues[q];
    QueueUsage u;
    u.name = spec.name, u.tenant = spec.tenant, u.cohort = spec.cohort;
    u.quota = spec.quota;
    for (const char* r : {"cpu", "memory", "gpu"}) u.used[r] = book.usage(static_cast<int>(q), r);
    u.borrowing = book.borrowing(static_cast<int>(q));
    usage.push_back(std::move(u));
  }
  for (const JobObject& job : jobs) {
    const int q = cluster_.queue_id(job.spec.queue);
    if (q < 0) continue;
    if (pending_like(job.status.phase)) usage[q].pending++;
    if (job.status.phase == JobPhase::kRunning || job.status.phase == JobPhase::kAdmitted) usage[q].running++;
  }
  for (const QueueUsage& u : usage) {
    registry_.set("koi_cluster_queue_pending_jobs", {{"queue", u.name}}, u.pending);
    registry_.set("koi_cluster_queue_running_jobs", {{"queue", u.name}}, u.running);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    usage_ = std::move(usage);
    node_free_ = state.free;
  }
  for (Controller* c : controllers_) {
    if (Status s = c->reconcile(now); !s.ok()) log::warn("reconcile {}: {}", c->name(), s.message());
  }
  keep_jobs(jobs);
  registry_.observe("koi_cluster_reconcile_seconds", {},
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  rounds_.fetch_add(1);
  return ok_status();
}

std::vector<QueueUsage> Reconciler::queue_usage() const {
  std::lock_guard<std::mutex> lock(mu_);
  return usage_;
}

std::vector<NodeFree> Reconciler::node_free() const {
  std::lock_guard<std::mutex> lock(mu_);
  return node_free_;
}

void Reconciler::set_admission_paused(bool paused) {
  paused_.store(paused);
  registry_.set("koi_cluster_admission_paused", {}, paused ? 1 : 0);
  wake();
}

void Reconciler::add_controller(Controller* controller) { controllers_.push_back(controller); }

void Reconciler::start() {
  thread_ = std::thread([this] { loop(); });
}

void Reconciler::stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Reconciler::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    woken_ = true;
  }
  cv_.notify_all();
}

void Reconciler::loop() {
  for (;;) {
    if (Status s = reconcile_once(wall_seconds()); !s.ok()) log::warn("reconcile: {}", s.message());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, std::chrono::duration<double>(options_.interval_seconds), [&] { return stop_ || woken_; });
    if (stop_) return;
    woken_ = false;
  }
}

}  // namespace koi::cluster
