// The replica wrapper behind `koi-exec --exit-file F --pid-file P [--memory-mib M]
// [--cpu-milli C] -- ARGV...` (src/koi-exec: a small binary of this module alone, so that
// starting one costs about a millisecond; `koi cluster exec` runs the same code), which the
// cluster's executors start for every replica: writes its own id ("pid:starttime")
// to P, runs ARGV in this process's own group, passes the group's signals to it by ignoring
// SIGTERM, SIGINT and SIGHUP itself, waits, and writes the exit record to F atomically.
// Returns the command's shell exit code (127 if it could not start).
//
// Limits: with a memory or CPU limit the command runs in a process::LimitGroup of its own
// (cgroups where this machine has them, process/limits.h): the wrapper starts
// `<join_command> --group G -- ARGV` (`koi-exec join`), which enters the group and then execs ARGV, so
// nothing of the command runs outside it; the wrapper itself stays outside, reads what the
// group saw when the command ends (OOM kill, peak memory) and removes it.
//
// The exit record, one fact per line:
//   exit N | signal N         how the command ended (always the first line)
//   oom-killed                the kernel's OOM killer ended a process of the replica
//   peak-memory-bytes N       the group's peak memory, when the mechanism can tell
//   limits MECHANISM          cgroup-v2 | cgroup-v1 | none: what enforced the limits
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace koi::process {

struct ExitRecord {
  int code = 0;
  int signal = 0;
  bool oom_killed = false;
  int64_t peak_memory_bytes = 0;
  std::string limits;  // "" when the replica had no limits
};

std::string format_exit_record(const ExitRecord& record);
// False when the first line is neither "exit N" nor "signal N"; unknown later lines are
// ignored (a newer wrapper may write more).
bool parse_exit_record(const std::string& text, ExitRecord* record);

struct WrapperOptions {
  std::string exit_file;
  std::string pid_file;
  int64_t memory_mib = 0;  // 0 = no limit
  int64_t cpu_milli = 0;   // 0 = no limit
  std::vector<std::string> argv;
  // How this binary runs run_join (e.g. {"/proc/self/exe", "join"}); needed with limits.
  std::vector<std::string> join_command;
};

int run_replica_wrapper(const WrapperOptions& options);
// The wrapper's command for an executor that runs `koi_binary`: koi-exec beside it when it is
// there (it starts in a fraction of the time: no engine, server or MPI libraries to load),
// else `koi_binary cluster exec`. Flags and ARGV follow.
std::vector<std::string> wrapper_command(const std::string& koi_binary);
// The join helper: enters the limit group `group`, then execs argv (returns only on error).
int run_join(const std::string& group, const std::vector<std::string>& argv);

}  // namespace koi::process
