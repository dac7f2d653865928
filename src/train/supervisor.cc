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
#include <thread>

#include "base/file.h"

namespace koi::train {
namespace {

constexpr const char* kSupervisorFlags[] = {"--nproc", "--max-restarts"};

// The flag name of "--name" or "--name=value".
std::string flag_name(const std::string& arg) { return arg.substr(0, arg.find('=')); }

// Starts argv in a new process group (a Ctrl-C reaches the supervisor only, which passes it
// on as SIGTERM); returns its pid, or -1.
pid_t spawn(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid != 0) {
    if (pid > 0) ::setpgid(pid, pid);
    return pid;
  }
  ::setpgid(0, 0);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "supervisor: cannot run %s; install Debian's openmpi-bin\n", args[0]);
  ::_exit(127);
}

// Waits for pid, passing *stop on as SIGTERM once. Returns its exit code (128 + signal
// when a signal ended it) and whether a stop was passed on.
int wait_child(pid_t pid, const std::atomic<bool>* stop, bool* stopped) {
  for (;;) {
    int status = 0;
    const pid_t done = ::waitpid(pid, &status, WNOHANG);
    if (done == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (done < 0) return 1;
    if (!*stopped && stop != nullptr && stop->load()) {
      *stopped = true;
      ::kill(pid, SIGTERM);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
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
  std::vector<std::string> cmd = {"mpirun", "--oversubscribe", "--bind-to", "none"};
  if (::geteuid() == 0) cmd.push_back("--allow-run-as-root");
  cmd.insert(cmd.end(), {"-np", std::to_string(nproc)});
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
    const std::vector<std::string> cmd = mpirun_command(koi_argv, nproc, restart > 0);
    const pid_t pid = spawn(cmd);
    if (pid < 0) {
      std::fprintf(stderr, "supervisor: fork failed\n");
      return 1;
    }
    const int code = wait_child(pid, stop, &stopped);
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
