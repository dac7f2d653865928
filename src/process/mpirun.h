// The one mpirun command line Koi starts MPI jobs with (Debian's Open MPI): `nproc` ranks on
// this machine, more ranks than cores allowed, no core binding (each rank has its own
// thread pool), and root allowed when this process is root (containers). The trainer's
// supervisor and the cluster's local executor append the rank's command to it.
#pragma once

#include <string>
#include <vector>

namespace koi::process {

std::vector<std::string> mpirun_prefix(int nproc);

}  // namespace koi::process
