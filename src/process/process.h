// Child processes: launch a program with its argv, environment, working directory and log
// files, in its own process group; signal it, wait for it, kill its group; read how it
// ended and what it used. The trainer's supervisor and the cluster's local executor run
// their children through here.
//
// launch() starts the child with posix_spawn (nothing runs between fork and exec but the
// C library's spawn code), as the leader of a new process group, so a terminal's Ctrl-C
// reaches only this process and signal_group()/kill_group() reach the child and everything
// it started that stayed in its group. Failures are Status values that name the program:
// not found or not executable (NotFound), a missing working directory (NotFound), a log
// file that cannot be opened (IoError).
//
// A Process owns its child: destroying one that was not waited for kills its group with
// SIGKILL and reaps the child, so no child outlives its owner unnoticed. Movable, not
// copyable. Not thread-safe: one thread waits for and signals a given Process.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::process {

struct LaunchOptions {
  // argv[0] is the program; without a '/' it is searched for in this process's PATH.
  std::vector<std::string> argv;
  // The child's environment: this process's with `env` set over it, or, when inherit_env
  // is false, exactly `env`.
  bool inherit_env = true;
  std::map<std::string, std::string> env;
  // The child's working directory; "" keeps this process's.
  std::string cwd;
  // Files the child's stdout and stderr are appended to (created 0644); "" inherits this
  // process's. The same path for both gives one file with both streams interleaved.
  std::string stdout_path;
  std::string stderr_path;
  // false: the child stays in this process's group (a wrapper that must receive the
  // signals sent to its own group together with the child it runs). signal_group() and
  // kill_group() then find no group with the child's id and do nothing: use signal().
  bool new_process_group = true;
};

// How a child ended, and what it used (wait4's rusage: the child and its waited-for
// descendants).
struct ExitStatus {
  int code = 0;    // the exit code when it exited, else 0
  int signal = 0;  // the signal that ended it, else 0
  double user_cpu_seconds = 0.0;
  double system_cpu_seconds = 0.0;
  int64_t max_rss_bytes = 0;

  bool success() const { return signal == 0 && code == 0; }
  // The code a shell reports: the exit code, or 128 + the signal.
  int shell_code() const { return signal != 0 ? 128 + signal : code; }
  // "exited with status 3", "killed by signal 9 (Killed)".
  std::string describe() const;
};

// "SIGSEGV" for 11 (sigabbrev_np), "signal 70" for a number without a name.
std::string signal_name(int sig);
// Whether `sig` is one the kernel sends a program for its own fault (SIGSEGV, SIGBUS, SIGILL,
// SIGFPE, SIGABRT, SIGTRAP, SIGSYS): a crash, not a kill from outside.
bool is_crash_signal(int sig);

class Process {
 public:
  static Result<Process> launch(const LaunchOptions& options);

  Process(Process&& other) noexcept;
  Process& operator=(Process&& other) noexcept;
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;
  ~Process();

  pid_t pid() const { return pid_; }  // also the process group id
  bool running() const { return pid_ > 0 && !exit_; }

  // Sends sig to the child alone, or to its whole process group. Signalling a child that
  // has been waited for is FailedPrecondition.
  Status signal(int sig);
  Status signal_group(int sig);
  Status kill_group() { return signal_group(SIGKILL); }

  // Blocks until the child ends; returns how (again on later calls).
  Result<ExitStatus> wait();
  // Waits at most `timeout` (0: a non-blocking poll); nullopt while it still runs.
  Result<std::optional<ExitStatus>> wait_for(std::chrono::milliseconds timeout);

 private:
  explicit Process(pid_t pid, std::string program) : pid_(pid), program_(std::move(program)) {}
  // Kills the group and reaps the child if it still runs (destructor, move assignment).
  void end();
  // One wait4(); options 0 blocks, WNOHANG polls. Sets exit_ when the child has ended.
  Status reap(int options);

  pid_t pid_ = -1;
  std::string program_;
  std::optional<ExitStatus> exit_;
};

// Field 22 of /proc/PID/stat (the start time in clock ticks since boot), or -1 when the
// process does not exist or is a zombie: with the pid, an id no later process can reuse.
int64_t process_start_time(int pid);

}  // namespace koi::process
