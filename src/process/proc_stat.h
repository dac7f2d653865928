// What /proc says about a process tree: which of its processes are stopped (SIGSTOP or
// SIGTSTP, state T), with the MPI rank each carries in its environment. The tree, not the
// process group: mpirun puts every rank in a group of its own. The control plane's
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

// The stopped processes among `root` and its descendants, by pid.
std::vector<StoppedProcess> stopped_processes(int root);

// "rank 1 (pid 4242, koi)" or "pid 4242 (sh)".
std::string describe(const StoppedProcess& p);

}  // namespace koi::process
