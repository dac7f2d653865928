// LocalExecutor: the embedded default executor. Every replica is a child process on this
// machine, under a small wrapper (koi-exec, process/replica_wrapper.h) that runs the
// real command in the same process group and writes how it ended to `<dir>/exit`:
//   <dir>/log    stdout and stderr of the replica
//   <dir>/pid    the wrapper's id, written by the wrapper before it starts the command
//   <dir>/exit   "exit N" or "signal N", written atomically when the command ends
// The wrapper is what lets a restarted control plane learn the exit status of a replica it
// did not start (only a parent can wait for a child): the replica's id is
// "<wrapper pid>:<start time in clock ticks>" (from /proc/<pid>/stat), so a recycled pid is
// never mistaken for the replica.
// Signals go to the wrapper's process group: the wrapper ignores SIGTERM/SIGINT/SIGHUP (its
// command receives them and decides), SIGKILL ends both.
// An MPI gang (ReplicaLaunch::mpi) runs as one wrapper around `mpirun -np N` (process/
// mpirun.h) in replica 0's directory, with the gang's devices and the sum of its limits;
// every replica's handle is that wrapper, and the ranks share replica 0's log.
// What it enforces: working directory, environment, CUDA_VISIBLE_DEVICES (the placed fake
// GPU ids), and the job's memory and CPU (spec.resources) through the wrapper's limit group
// (cgroups v2, else v1, else nothing, said in the replica's log: process/limits.h; an
// OOM kill and the peak memory come back in the exit record). maxRuntime and the grace
// period are enforced by the reconciler.
// Usage: every declared node is this machine, so each reports this machine's figures
// (/proc and nvidia-smi, sampled every second by a HostSampler thread, node_usage.h).
// Not thread-safe except logs(), inventory() and usage(); the reconciler's thread calls it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "cluster/control_plane/executor.h"
#include "process/process.h"

namespace koi::cluster {

class LocalExecutor : public Executor {
 public:
  // `koi_binary` runs the wrapper (`koi cluster exec`); `nodes` is the declared inventory.
  LocalExecutor(std::string koi_binary, std::vector<NodeSpec> nodes);
  ~LocalExecutor() override;

  std::string name() const override { return "local"; }
  std::vector<NodeSpec> inventory() const override { return nodes_; }
  Result<std::vector<ReplicaHandle>> launch(const std::vector<ReplicaLaunch>& gang) override;
  bool adopt(const ReplicaHandle& replica) override;
  ReplicaStatus status(const ReplicaHandle& replica) override;
  std::optional<ReplicaHandle> find(const std::string& dir) override;
  Status signal(const ReplicaHandle& replica, int sig) override;
  Result<std::string> logs(const ReplicaHandle& replica, int64_t offset, int64_t max_bytes) const override;
  // The stopped processes of the replica's tree: the wrapper, its command and (mpirun) the ranks.
  std::vector<process::StoppedProcess> stopped(const ReplicaHandle& replica) const override;
  std::map<std::string, std::vector<NodeUsage>> usage(size_t max_samples) const override;
  void detach() override;

 private:
  Result<ReplicaHandle> launch_one(const ReplicaLaunch& replica);
  Result<std::vector<ReplicaHandle>> launch_mpi(const std::vector<ReplicaLaunch>& gang);

  std::string koi_binary_;
  std::vector<NodeSpec> nodes_;
  HostSampler sampler_;
  std::map<std::string, std::unique_ptr<process::Process>> children_;  // by id; ours to wait for
};

// Bytes of <dir>/log from `offset` (negative: the last bytes), at most max_bytes; "" when
// there is no log yet. Shared by every executor whose replicas write <dir>/log.
Result<std::string> read_replica_log(const std::string& dir, int64_t offset, int64_t max_bytes);

}  // namespace koi::cluster
