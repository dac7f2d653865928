// Reconciler: the control loop that makes the cluster match the store. One round:
//   1. reads every active job: its own copy of them (jobs_), with the bodies re-read from the
//      store only where the resourceVersion changed (another writer: a submit, a cancel);
//   2. watches running ones through the executor: exits, lost replicas, maxRuntime, hangs
//      (no growth of the replica logs nor of <checkpointDir>/metrics.jsonl for
//      hangTimeoutSeconds), cancels (metadata.deletionTimestamp, set by the API);
//   3. stops what must stop: SIGTERM to every replica, SIGKILL after the grace period;
//   4. applies the healing rules when a stopped job's replicas have all ended (below);
//   5. builds a cluster::ClusterState from the jobs holding resources, runs cluster::plan()
//      and applies its decisions: Preempt starts a graceful stop; admissions listed after a
//      preemption wait ("Preempting") until the victims are gone, then get a pass of their
//      own at what they freed (docs/cluster.md); Admit records the placement (Admitted) and
//      launches the gang through the executor (Running);
//   6. writes plan()'s explanation into every waiting job's status (reason, message).
// While admission is paused (set_admission_paused(), an admin's `koi cluster pause`), steps
// 1-4 go on (exits, stops and healing are recorded) but 5 is skipped: nothing is admitted or
// preempted, and every waiting job says AdmissionPaused. Resuming plans everything that
// arrived or ended meanwhile in one round, as `koi sim` plans one instant.
// Each round starts from the executor's inventory (Executor::inventory()): a node it reports
// down or drained keeps its index but offers nothing to plan(), so work waits or goes
// elsewhere; a node back takes work again.
// Healing rules (the budget is status.restarts against spec.restartPolicy.maxRestarts, kept
// on the job record, so it survives a control-plane restart):
//   all replicas exit 0                 -> Succeeded
//   a replica fails (exit code/signal)  -> the rest are stopped; then: exit code in
//     neverRetryExitCodes -> Failed; in retryExitCodes -> Restarting, budget untouched;
//     else budget left -> Restarting after backoff * 2^(spent) capped at maxBackoffSeconds,
//     budget spent; else Failed with the last exit code or signal and the log tail
//   hang timeout                        -> treated as a failure (spends the budget)
//   maxRuntimeSeconds exceeded          -> Failed (DeadlineExceeded)
//   preempted                           -> Preempted, pending again (budget untouched)
//   replica lost, launch failed         -> Restarting at once (budget untouched)
// A restart of a train/finetune job passes --resume: koi train continues from the newest
// complete checkpoint in its run directory (spec.checkpointDir).
// recover() runs once at start: a Running job whose replicas are alive is adopted; the
// dead ones are judged by their exit records like any exit; an Admitted job (its launch
// was interrupted) is requeued, budget untouched.
//
// Threading: the loop has its own thread (start()/stop()), not a timer on the HTTP server's
// io_context: a round makes blocking store calls and process polls, which would stall the
// API's worker. wake() makes the next round start at once (after a submit or cancel).
// reconcile_once() is public so tests drive rounds by hand with their own `now`.
// Controllers of the other kinds (Deployment, Pipeline) run at the end of every round, on
// this thread: they see the round's job phases and act by writing objects (submit_job,
// cancels) that the next round carries out; they never call the executor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "base/metrics.h"
#include "base/status.h"
#include "cluster/control_plane/executor.h"
#include "cluster/control_plane/state_store.h"
#include "cluster/scheduler.h"

namespace koi::cluster {

// A controller of a kind beyond jobs. reconcile() makes that kind's objects converge (it may
// create and cancel jobs through the store); an error is logged and the round goes on.
class Controller {
 public:
  virtual ~Controller() = default;
  virtual std::string name() const = 0;
  virtual Status reconcile(double now) = 0;
};

struct ReconcilerOptions {
  std::string work_dir;    // <work_dir>/<ns>/<job>/<attempt>/<replica>/
  std::string koi_binary;  // what train/eval jobs run
  Policy policy;
  double interval_seconds = 0.2;
};

// What `koi queue list` shows, from the last round.
struct QueueUsage {
  std::string name, tenant, cohort;
  int pending = 0, running = 0;
  std::map<std::string, int64_t> used;  // resource -> amount (cpu, gpu in milli; memory MiB)
  std::map<std::string, Quota> quota;
  bool borrowing = false;
};

// <work_dir>/<ns>/<name>/<attempt>/<replica>: a replica's working directory and log.
std::string replica_dir(const std::string& work_dir, const std::string& ns, const std::string& name, int attempt,
                        int replica);
// A job's run directory: spec.checkpointDir, else <work_dir>/<ns>/<name>/checkpoints.
std::string job_checkpoint_dir(const std::string& work_dir, const JobObject& job);

class Reconciler {
 public:
  Reconciler(StateStore& store, Executor& executor, Cluster cluster, metrics::Registry& registry,
             ReconcilerOptions options);
  ~Reconciler();

  Status recover(double now);
  Status reconcile_once(double now);

  // Runs `controller` at the end of every round, in the order added (before start();
  // the reconciler does not own it).
  void add_controller(Controller* controller);

  void start();
  void stop();
  void wake();

  std::vector<QueueUsage> queue_usage() const;
  // Replaces or adds a queue (by name); in force from the next round, visible through
  // cluster() at once. Thread-safe.
  void set_queue(const QueueSpec& queue);
  // Free resources per node (Cluster::nodes order) after the last round.
  std::vector<NodeFree> node_free() const;
  // The cluster as last published (thread-safe; the reconciler's own copy changes only
  // between rounds, on its thread).
  std::shared_ptr<const Cluster> cluster() const;
  // Admission pause (thread-safe; in force from the next round) and the number of rounds
  // completed so far (a caller waiting for the loop to settle compares two readings).
  void set_admission_paused(bool paused);
  bool admission_paused() const { return paused_.load(); }
  int64_t rounds() const { return rounds_.load(); }

 private:
  struct Work;  // one round's view of one job
  Status commit(JobObject& job, std::vector<Event> events);
  // The active jobs, in list_jobs' order (submission): those unchanged since this thread last read or
  // wrote them come from jobs_, the rest from the store (one list when many changed).
  Result<std::vector<JobObject>> active_jobs();
  void keep_jobs(std::vector<JobObject>& jobs);  // back into jobs_ at a round's end
  void event(std::vector<Event>& events, const JobObject& job, const std::string& type, const std::string& reason,
             const std::string& message, double now);
  void transition(JobObject& job, JobPhase phase, const std::string& reason, const std::string& message, double now,
                  std::vector<Event>& events, const std::string& event_type = "Normal");
  void begin_stop(JobObject& job, const std::string& cause, const std::string& message, double now,
                  std::vector<Event>& events);
  void finish_stop(JobObject& job, double now, std::vector<Event>& events);
  void handle_failure(JobObject& job, int exit_code, int signal, const std::string& detail, double now,
                      std::vector<Event>& events);
  bool poll_replicas(JobObject& job);  // true when every replica has ended
  // A diagnosis (docs/cluster.md#diagnoses): the condition `code` (True, with the message)
  // on the job's status and a Warning event with reason `code`.
  void diagnose(JobObject& job, const std::string& code, const std::string& message, double now,
                std::vector<Event>& events);
  // What a job that made no progress is stuck on: the stopped processes (named by rank), with
  // the trainer's collective-watchdog report when its log has one (watchdog_report.h); else
  // that report; else the last lines of its log. A job the watchdog itself ended (a failed
  // replica whose log has the report) is diagnosed Hung with the report too.
  std::string hang_cause(const JobObject& job) const;
  // A running train/finetune job's Straggler and SlowProgress diagnoses from the tail of its
  // metrics.jsonl (train_pace.h); each reported once per attempt (and rank).
  void judge_pace(JobObject& job, double now, std::vector<Event>& events);
  std::string log_tail(const JobObject& job, int64_t max_bytes) const;
  double last_progress(const JobObject& job) const;
  Status launch(JobObject& job, const std::vector<Placement>& placements, double now);
  std::string checkpoint_dir(const JobObject& job) const;
  Job to_scheduler_job(const JobObject& job, int id) const;
  std::set<std::string> waiting_preemptors(const std::vector<JobObject>& jobs) const;
  ClusterState schedule(std::vector<JobObject>& jobs, double now, const std::set<std::string>& waiting,
                        bool only_waiting);
  void loop();
  // Takes the executor's inventory (node states: down, drained, back) into cluster_ and
  // publishes it when it changed; a node that stopped or started taking work is written to
  // the store with an event (NodeUnschedulable, NodeReady). Applies a pending queue update first.
  // Exports the nodes' measured usage (executor_.usage()) as the koi_cluster_node_* gauges.
  void refresh_inventory(double now);

  StateStore& store_;
  Executor& executor_;
  Cluster cluster_;  // the reconciler thread's; replaced by a pending update at a round's start
  metrics::Registry& registry_;
  const ReconcilerOptions options_;

  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;                // guarded by mu_
  std::atomic<bool> paused_{false};
  bool round_paused_ = false;        // paused_ as this round read it (reconciler thread)
  std::atomic<int64_t> rounds_{0};
  bool woken_ = false;               // guarded by mu_
  std::vector<QueueUsage> usage_;    // guarded by mu_
  std::vector<NodeFree> node_free_;  // guarded by mu_
  std::shared_ptr<const Cluster> published_;  // guarded by mu_
  bool cluster_changed_ = false;              // guarded by mu_: published_ is newer than cluster_
  std::vector<Controller*> controllers_;
  // The reconciler thread's copy of the active jobs as last read or committed (key ns/name),
  // so a round reads the bodies only of jobs another writer changed; stale_ holds the keys
  // whose last commit failed (the copy may differ from the store).
  std::map<std::string, JobObject> jobs_;
  std::set<std::string> stale_;
  std::thread thread_;
};

}  // namespace koi::cluster
