// What /proc says about the processes of a group: which of them are stopped (SIGSTOP or
// SIGTSTP, state T), with the MPI rank each carries in its environment. The control plane's
// hang diagnosis names them (cluster/control_plane/local_executor.cc). Linux only; a process
// that ends during the scan is skipped. Thread-safe (reads files only).
#pragma once

#include <string>
#include <vector>

namespace koi::process {

struct StoppedProcess {
  int pid = 0;
  int rank = -1;        // OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID; -1 without one
  std::string command;  // /proc/PID/comm
};

// The stopped processes whose process group is `pgid`, by pid.
std::vector<StoppedProcess> stopped_processes(int pgid);

// "rank 1 (pid 4242, koi)" or "pid 4242 (sh)".
std::string describe(const StoppedProcess& p);

}  // namespace koi::process
