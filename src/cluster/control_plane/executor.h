// Executor: where the control plane's decisions become running work. The reconciler
// (reconciler.h) decides; an executor only acts and reports. One implementation per
// backend, each one file: local_executor.{h,cc} (child processes on this machine, the
// embedded default), slurm_executor.{h,cc} (one sbatch allocation per attempt); Kubernetes
// (a Job/JobSet per Koi job) later.
//
// A replica is named by a ReplicaHandle whose `id` only the executor understands (local:
// "pid:starttime"; Slurm: "jobid.task") and which the reconciler keeps on the job
// record in the store, so a restarted control plane can ask about work it did not start.
//
// Slots:
//   inventory()  the nodes this executor offers (local: the declared ones, unchanged;
//                Slurm: what slurmctld last reported). A node with NodeSpec::state set
//                (down, drained) takes no new work. Thread-safe; never blocks on a backend.
//   refresh_inventory()  optional (default: nothing): asks the backend again; the
//                reconciler calls it at the start of every round
//   launch()     starts a whole gang or nothing: on failure every replica it started is
//                stopped before it returns the error (an infrastructure failure); one
//                handle per replica, in order (an MPI gang's replicas may share one)
//   adopt()      after a control-plane restart: takes over a replica it did not start;
//                false when the replica is gone
//   status()     running, exited (with code or signal), or lost (gone without an exit
//                record: an infrastructure failure)
//   find()       the replica running in a working directory, if any: after a launch that
//                the control plane did not live to record
//   signal()     sends a signal to the replica's whole process tree
//   stop()       SIGKILL to the whole tree
//   logs()       bytes of the replica's log from `offset` (at most `max_bytes`)
//   stopped()    optional (default: none known): the replica's processes that are stopped
//                (SIGSTOP, SIGTSTP), each with its MPI rank: what a hang diagnosis names
//   usage()      optional (default: none measured): each node's measured usage (node_usage.h),
//                by node name, its last `max_samples` samples oldest first. Thread-safe;
//                never blocks on a backend (local: a sampler thread; Slurm: the last scontrol)
//   detach()     on shutdown: leaves the replicas running for the next control plane
// Called from the reconciler's thread only (logs() also from API threads: it reads files;
// inventory() and usage() from any thread).
#pragma once

#include <csignal>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/node_usage.h"
#include "cluster/types.h"
#include "process/proc_stat.h"

namespace koi::cluster {

struct ReplicaLaunch {
  std::vector<std::string> argv;
  std::map<std::string, std::string> env;  // over the control plane's own
  std::string dir;                          // working directory; created by launch()
  int node = 0;
  std::string node_name;                    // inventory()[node].name when plan() ran
  std::vector<int> gpus;                    // device ids on that node
  int64_t memory_mib = 0;                   // limits where the executor can enforce them; 0 = none
  int64_t cpu_milli = 0;
  // The gang of a distributed job (train or finetune with replicas > 1): its replicas are
  // the ranks of one MPI job and launch as one (local: one mpirun; Slurm: the tasks of one
  // step). Every replica's handle then names that launch.
  bool mpi = false;
};

struct ReplicaHandle {
  std::string id;
  std::string dir;
};

enum class ReplicaState { kRunning, kExited, kLost };

struct ReplicaStatus {
  ReplicaState state = ReplicaState::kRunning;
  int exit_code = 0;
  int signal = 0;
  std::string detail;  // "exited with status 3", "killed by signal 9 (Killed)", why it was lost
  bool oom_killed = false;        // ended by the OOM killer at its memory limit
  int64_t peak_memory_bytes = 0;  // 0 when unknown
};

class Executor {
 public:
  virtual ~Executor() = default;
  virtual std::string name() const = 0;
  virtual std::vector<NodeSpec> inventory() const = 0;
  virtual void refresh_inventory() {}
  virtual Result<std::vector<ReplicaHandle>> launch(const std::vector<ReplicaLaunch>& gang) = 0;
  virtual bool adopt(const ReplicaHandle& replica) = 0;
  virtual ReplicaStatus status(const ReplicaHandle& replica) = 0;
  virtual std::optional<ReplicaHandle> find(const std::string& dir) = 0;
  virtual Status signal(const ReplicaHandle& replica, int sig) = 0;
  virtual Status stop(const ReplicaHandle& replica) { return signal(replica, SIGKILL); }
  virtual Result<std::string> logs(const ReplicaHandle& replica, int64_t offset, int64_t max_bytes) const = 0;
  virtual std::vector<process::StoppedProcess> stopped(const ReplicaHandle& replica) const {
    (void)replica;
    return {};
  }
  virtual std::map<std::string, std::vector<NodeUsage>> usage(size_t max_samples) const {
    (void)max_samples;
    return {};
  }
  virtual void detach() = 0;
};

}  // namespace koi::cluster
