// The training supervisor (`koi train --nproc N --max-restarts R ...`): runs
// `mpirun -np N koi train ...` as a child in its own process group, and when it exits
// non-zero (a rank crashed, or the collective watchdog ended the job), kills whatever is
// left of the job (it is the ranks' child subreaper) and starts it again with --resume, at
// most R times; each restart continues from the run's newest complete checkpoint. *stop
// (SIGTERM, Ctrl-C) is passed on to mpirun, which passes it to the ranks (they checkpoint
// and stop), and ends supervision.
// Plain functions; one supervision per process.
#pragma once

#include <atomic>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::train {

// This process's command line (/proc/self/cmdline) with argv[0] replaced by the path of the
// running executable (/proc/self/exe).
Result<std::vector<std::string>> own_command_line();

// The mpirun command that runs koi_argv (a `koi train` command line) on nproc ranks, without
// the supervisor's own flags (--nproc, --max-restarts) and with --resume when resume is set.
// mpirun gets --oversubscribe and --bind-to none (each rank runs a thread pool), and
// --allow-run-as-root when this process is root.
std::vector<std::string> mpirun_command(const std::vector<std::string>& koi_argv, int nproc, bool resume);

// Runs mpirun_command() until it exits 0, restarting it with --resume at most max_restarts
// times after a non-zero exit. Returns the exit code for this process.
int supervise(const std::vector<std::string>& koi_argv, int nproc, int max_restarts, const std::atomic<bool>* stop);

}  // namespace koi::train
