// SlurmExecutor: the control plane's work runs on a Slurm cluster. Koi keeps its queues,
// quotas, priorities and plan() above; Slurm launches, isolates and tracks the processes.
// Every Slurm command (sinfo, scontrol, sbatch, squeue, scancel) runs through
// process::Process with a timeout; SLURM_CONF and PATH come from the control plane's
// environment.
//
// Mapping (docs/cluster.md has the full table):
//   inventory  `scontrol show node -o` of the partition: CPUs, RealMemory, gres gpu[:type]:N,
//              State; `scontrol show topology`: a node's level-0 switch is its leafSwitch,
//              that switch's parent its spine. A node that is down, drained, failing or not
//              responding has NodeSpec::state set ("down", "drain", ...) and takes no new work.
//   launch     the whole gang is one allocation: `sbatch --parsable` with --nodelist (the
//              nodes plan() chose), --ntasks (one task per replica), --distribution=arbitrary
//              with SLURM_HOSTFILE (task i on replica i's node), --cpus-per-task,
//              --mem-per-cpu, --gpus-per-task, --no-requeue (Koi requeues, not Slurm). The
//              batch script runs one `srun` step (--mpi=<executor.mpi> for train and
//              finetune jobs, so the replicas are the ranks of one MPI world; none otherwise);
//              each task runs its replica's command under `koi cluster exec` in its own
//              working directory, with its own environment, its output appended to <dir>/log
//              and its exit record in <dir>/exit, exactly as on the local executor. The
//              attempt's directory (the parent of the replica directories) holds the scripts
//              and the batch log and must be on a filesystem every node sees.
//   ids        "<slurm job id>.<task>"; one Slurm job per attempt.
//   status     one `squeue --states=all` a round for every job (cached for a fraction of a
//              second); a job Slurm has forgotten (MinJobAge) is looked up in the
//              job-completion log (JobCompLoc of jobcomp/filetxt). A replica with an exit
//              record has exited; a job that ended NODE_FAIL/BOOT_FAIL, or is pending on a
//              node that is gone, has lost its replicas; one that ended with no exit record
//              for a replica lost that replica.
//   usage      from the same `scontrol show node -o`: slurmd's CPULoad (the node's 1-minute load
//              average) per node, one sample a refresh (node_usage.h); no CPU utilisation,
//              memory or GPU figures (slurmd reports none that mean "in use")
//   signal     `scancel --signal=SIG <job>` (every step, not the batch shell); one signal per
//              job even though the reconciler signals each replica; SIGKILL:
//              `scancel --signal=KILL --full <job>` and `scancel <job>`.
// Transient failures: a command that times out or exits non-zero is retried (3 tries); if
// it still fails, status() reports the replica as running (unknown is not failed) and
// inventory() keeps the last good answer, so a slurmctld hiccup never fails a job.
// Thread-safety: inventory() and logs() may be called from API threads (inventory is the
// last answer, under a mutex: it never waits for Slurm); everything else, refresh_inventory()
// included, from the reconciler's thread.
#pragma once

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cluster/control_plane/executor.h"

namespace koi::cluster {

struct SlurmOptions {
  std::string partition;             // "" = Slurm's default partition
  std::string mpi = "pmix";          // srun --mpi for train/finetune gangs
  double command_timeout_seconds = 10;
  std::string scratch_dir;           // where command output is captured (the work dir)
  std::string koi_binary;            // runs the replica wrapper on the nodes
};

class SlurmExecutor : public Executor {
 public:
  // Reads the inventory and the job-completion log's location once; fails when Slurm does
  // not answer (the control plane then refuses to start).
  static Result<std::unique_ptr<SlurmExecutor>> create(SlurmOptions options);

  std::string name() const override { return "slurm"; }
  std::vector<NodeSpec> inventory() const override;
  void refresh_inventory() override;  // at most once a second
  Result<std::vector<ReplicaHandle>> launch(const std::vector<ReplicaLaunch>& gang) override;
  bool adopt(const ReplicaHandle& replica) override;
  ReplicaStatus status(const ReplicaHandle& replica) override;
  std::optional<ReplicaHandle> find(const std::string& dir) override;
  Status signal(const ReplicaHandle& replica, int sig) override;
  Status stop(const ReplicaHandle& replica) override;
  Result<std::string> logs(const ReplicaHandle& replica, int64_t offset, int64_t max_bytes) const override;
  std::map<std::string, std::vector<NodeUsage>> usage(size_t max_samples) const override;
  void detach() override {}  // the jobs are Slurm's; nothing is ours to leave behind

 private:
  struct JobState {
    std::string state;   // RUNNING, PENDING, COMPLETED, NODE_FAIL, ...
    std::string reason;  // squeue %r
    std::string work_dir;
    std::string nodes;   // the allocation's host list
    bool known = false;  // Slurm (or its completion log) knows the job
  };

  explicit SlurmExecutor(SlurmOptions options) : options_(std::move(options)) {}
  // Runs a Slurm command (3 tries, each under the timeout); its stdout, or the last error.
  Result<std::string> run(const std::vector<std::string>& argv, bool retry = true,
                          const std::map<std::string, std::string>& env = {}) const;
  // The partition's nodes; with `usage`, also what parse_slurm_usage finds in the same answer.
  Result<std::vector<NodeSpec>> read_inventory(std::map<std::string, NodeUsage>* usage = nullptr) const;
  void add_usage(std::map<std::string, NodeUsage> samples);  // into usage_
  Status refresh_jobs();
  JobState job_state(const std::string& job_id);
  // "h1 is down+not_responding" for the first node of the job Slurm reports unusable, else "".
  std::string lost_node(const JobState& job);
  Status signal_job(const std::string& job_id, int sig);

  SlurmOptions options_;
  std::string jobcomp_path_;
  mutable std::mutex mu_;
  std::vector<NodeSpec> nodes_;                   // guarded by mu_
  std::map<std::string, std::deque<NodeUsage>> usage_;  // guarded by mu_: by node, oldest first
  mutable int command_seq_ = 0;                   // guarded by mu_
  std::chrono::steady_clock::time_point nodes_time_{};  // reconciler thread
  std::map<std::string, JobState> jobs_;  // squeue's answer, by job id
  std::chrono::steady_clock::time_point jobs_time_{};
  std::map<std::pair<std::string, int>, std::chrono::steady_clock::time_point> signalled_;  // (job, signal) -> when
};

// Parsers of Slurm's output, public for the unit tests.
// `scontrol show node -o` lines + `scontrol show topology` lines -> nodes by name order.
std::vector<NodeSpec> parse_slurm_nodes(const std::string& nodes_text, const std::string& topology_text);
// "key=value key=value" (scontrol -o, jobcomp/filetxt); values run to the next " key=".
std::map<std::string, std::string> parse_slurm_record(const std::string& line);
// `scontrol show node -o` lines -> each node's measured usage at `now` (CPULoad as the load
// average; nodes without a CPULoad figure are left out).
std::map<std::string, NodeUsage> parse_slurm_usage(const std::string& nodes_text, double now);
// Slurm host lists: "h[0-2],x5" -> h0 h1 h2 x5.
std::vector<std::string> expand_hostlist(const std::string& list);

}  // namespace koi::cluster
