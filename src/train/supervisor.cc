#include "train/supervisor.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "base/file.h"
#include "process/mpirun.h"
#include "process/process.h"

namespace koi::train {
namespace {

constexpr const char* kSupervisorFlags[] = {"--nproc", "--max-restarts"};

// The flag name of "--name" or "--name=value".
std::string flag_name(const std::string& arg) { return arg.substr(0, arg.find('=')); }

// Waits for the job, passing *stop on to mpirun as SIGTERM once. Returns its exit code
// (128 + signal when a signal ended it) and whether a stop was passed on.
int wait_child(process::Process& job, const std::atomic<bool>* stop, bool* stopped) {
  for (;;) {
    auto ended = job.wait_for(std::chrono::milliseconds(100));
    if (!ended.ok()) {
      std::fprintf(stderr, "supervisor: %s\n", ended.status().message().c_str());
      return 1;
    }
    if (ended->has_value()) return (*ended)->shell_code();
    if (!*stopped && stop != nullptr && stop->load()) {
      *stopped = true;
      (void)job.signal(SIGTERM);
    }
  }
}

// Kills and reaps every child process of this one. As a child subreaper this process
// inherits the ranks of an mpirun that died before them (mpirun itself ends the ranks of a
// job it aborts, a SIGSTOPped one included).
void kill_leftovers() {
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const size_t paren = stat.rfind(')');  // "pid (comm) state ppid ..."; comm may hold spaces
    char state = 0;
    int ppid = 0;
    if (paren == std::string::npos || std::sscanf(stat.c_str() + paren + 1, " %c %d", &state, &ppid) != 2) continue;
    if (ppid != ::getpid()) continue;
    const pid_t pid = static_cast<pid_t>(std::strtol(name.c_str(), nullptr, 10));
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
  }
}

}  // namespace

Result<std::vector<std::string>> own_command_line() {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file("/proc/self/cmdline"));
  std::vector<std::string> argv;
  for (size_t begin = 0; begin < text.size();) {
    const size_t end = text.find('\0', begin);
    argv.push_back(text.substr(begin, end - begin));
    begin = end == std::string::npos ? text.size() : end + 1;
  }
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (argv.empty() || ec) return Status::internal("cannot read this process's command line from /proc/self");
  argv[0] = exe.string();
  return argv;
}

std::vector<std::string> mpirun_command(const std::vector<std::string>& koi_argv, int nproc, bool resume) {
  std::vector<std::string> cmd = process::mpirun_prefix(nproc);
  bool has_resume = false;
  for (size_t i = 0; i < koi_argv.size(); ++i) {
    const std::string& arg = koi_argv[i];
    const bool supervisor_flag = std::find(std::begin(kSupervisorFlags), std::end(kSupervisorFlags),
                                           flag_name(arg)) != std::end(kSupervisorFlags);
    if (supervisor_flag) {
      if (arg.find('=') == std::string::npos) ++i;  // skip the value too
      continue;
    }
    has_resume = has_resume || arg == "--resume";
    cmd.push_back(arg);
  }
  if (resume && !has_resume) cmd.push_back("--resume");
  return cmd;
}

int supervise(const std::vector<std::string>& koi_argv, int nproc, int max_restarts, const std::atomic<bool>* stop) {
  ::prctl(PR_SET_CHILD_SUBREAPER, 1);
  bool stopped = false;
  for (int restart = 0;; ++restart) {
    // Its own process group: a Ctrl-C reaches the supervisor only, which passes it on.
    process::LaunchOptions job_options;
    job_options.argv = mpirun_command(koi_argv, nproc, restart > 0);
    auto job = process::Process::launch(job_options);
    if (!job.ok()) {
      std::fprintf(stderr, "supervisor: %s (mpirun comes with Debian's openmpi-bin)\n", job.status().message().c_str());
      return 127;
    }
    const int code = wait_child(*job, stop, &stopped);
    kill_leftovers();
    if (code == 0 || stopped) return code;
    if (restart == max_restarts) {
      std::fprintf(stderr, "supervisor: the job exited with status %d; giving up after %d restarts\n", code,
                   max_restarts);
      return code;
    }
    std::fprintf(stderr, "supervisor: the job exited with status %d; restart %d of %d from the last checkpoint\n",
                 code, restart + 1, max_restarts);
  }
}

}  // namespace koi::train
