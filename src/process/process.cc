#include "process/process.h"

#include <iterator>
#include <sstream>
#include <fstream>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "base/file.h"

extern char** environ;

namespace koi::process {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(10);

std::string errno_text(int err) { return std::strerror(err); }

// argv[0] as an absolute path: searched for in PATH when it has no '/', else made absolute
// against this process's working directory (the child's may differ).
Result<std::string> resolve_program(const std::string& program) {
  if (program.find('/') != std::string::npos) {
    std::error_code ec;
    const std::string path = std::filesystem::absolute(program, ec).string();
    if (ec) return Status::io_error(program + ": cannot resolve the path: " + ec.message());
    if (::access(path.c_str(), X_OK) != 0) {
      return Status::not_found(program + ": cannot run it: " + errno_text(errno));
    }
    return path;
  }
  const char* path_env = std::getenv("PATH");
  const std::string dirs = path_env != nullptr ? path_env : "/usr/local/bin:/usr/bin:/bin";
  for (size_t begin = 0; begin <= dirs.size();) {
    const size_t end = std::min(dirs.find(':', begin), dirs.size());
    const std::string dir = end == begin ? "." : dirs.substr(begin, end - begin);
    std::error_code ec;
    const std::string candidate = std::filesystem::absolute(path_join(dir, program), ec).string();
    if (!ec && ::access(candidate.c_str(), X_OK) == 0 && !is_directory(candidate)) return candidate;
    begin = end + 1;
  }
  return Status::not_found(program + ": program not found in PATH; install it or pass its full path");
}

// "KEY=VALUE" strings: this process's environment with `env` over it, or `env` alone.
std::vector<std::string> child_environment(const LaunchOptions& o) {
  std::vector<std::string> out;
  if (o.inherit_env) {
    for (char** e = environ; *e != nullptr; ++e) {
      const std::string entry = *e;
      if (!o.env.contains(entry.substr(0, entry.find('=')))) out.push_back(entry);
    }
  }
  for (const auto& [key, value] : o.env) out.push_back(key + "=" + value);
  return out;
}

std::vector<char*> c_strings(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

// The file descriptors of the child's log files, closed when the launch is over.
class LogFiles {
 public:
  ~LogFiles() {
    for (int fd : fds_) ::close(fd);
  }
  // Opens `path` for appending (once per path); -1 for "" (inherit).
  Result<int> open(const std::string& path) {
    if (path.empty()) return -1;
    if (path == opened_path_) return fds_.back();
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return Status::io_error(path + ": cannot open the log file: " + errno_text(errno));
    fds_.push_back(fd);
    opened_path_ = path;
    return fd;
  }

 private:
  std::vector<int> fds_;
  std::string opened_path_;
};

}  // namespace

std::string signal_name(int sig) {
  const char* abbrev = ::sigabbrev_np(sig);
  return abbrev ? std::string("SIG") + abbrev : "signal " + std::to_string(sig);
}

bool is_crash_signal(int sig) {
  return sig == SIGSEGV || sig == SIGBUS || sig == SIGILL || sig == SIGFPE || sig == SIGABRT || sig == SIGTRAP ||
         sig == SIGSYS;
}

std::string ExitStatus::describe() const {
  if (signal != 0) return "killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  return "exited with status " + std::to_string(code);
}

Result<Process> Process::launch(const LaunchOptions& o) {
  if (o.argv.empty()) return Status::invalid_argument("cannot launch an empty command line");
  const std::string& program = o.argv[0];
  if (!o.cwd.empty() && !is_directory(o.cwd)) {
    return Status::not_found(program + ": the working directory " + o.cwd + " does not exist");
  }
  KOI_ASSIGN_OR_RETURN(const std::string path, resolve_program(program));
  LogFiles logs;
  KOI_ASSIGN_OR_RETURN(const int out_fd, logs.open(o.stdout_path));
  KOI_ASSIGN_OR_RETURN(const int err_fd, logs.open(o.stderr_path));

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  if (out_fd >= 0) posix_spawn_file_actions_adddup2(&actions, out_fd, STDOUT_FILENO);
  if (err_fd >= 0) posix_spawn_file_actions_adddup2(&actions, err_fd, STDERR_FILENO);
  if (!o.cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, o.cwd.c_str());
  // A new process group; no blocked signals and default dispositions (an ignored SIGPIPE or
  // SIGTERM of this process would otherwise survive the exec).
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, (o.new_process_group ? POSIX_SPAWN_SETPGROUP : 0) | POSIX_SPAWN_SETSIGMASK |
                                      POSIX_SPAWN_SETSIGDEF);

  std::vector<std::string> argv = o.argv, envp = child_environment(o);
  std::vector<char*> argv_c = c_strings(argv), envp_c = c_strings(envp);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, path.c_str(), &actions, &attr, argv_c.data(), envp_c.data());
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) return Status::io_error(program + ": cannot start it: " + errno_text(rc));
  return Process(pid, program);
}

Process::Process(Process&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), program_(std::move(other.program_)), exit_(std::move(other.exit_)) {}

Process& Process::operator=(Process&& other) noexcept {
  if (this != &other) {
    end();
    pid_ = std::exchange(other.pid_, -1);
    program_ = std::move(other.program_);
    exit_ = std::move(other.exit_);
  }
  return *this;
}

Process::~Process() { end(); }

void Process::end() {
  if (!running()) return;
  // A child left in its parent's group (new_process_group = false) has no group of its own.
  if (::killpg(pid_, SIGKILL) != 0) ::kill(pid_, SIGKILL);
  (void)reap(0);
}

Status Process::signal(int sig) {
  if (!running()) return Status::failed_precondition(program_ + " (pid " + std::to_string(pid_) + ") has already ended");
  if (::kill(pid_, sig) != 0) return Status::io_error(program_ + ": cannot signal it: " + errno_text(errno));
  return ok_status();
}

Status Process::signal_group(int sig) {
  if (pid_ <= 0) return Status::failed_precondition("signal_group on a Process that was moved from");
  // After the child has been waited for this reaches what is left of its group, if anything.
  if (::killpg(pid_, sig) != 0 && errno != ESRCH) {
    return Status::io_error(program_ + ": cannot signal its process group: " + errno_text(errno));
  }
  return ok_status();
}

Status Process::reap(int options) {
  int status = 0;
  rusage usage{};
  pid_t r;
  do {
    r = ::wait4(pid_, &status, options, &usage);
  } while (r < 0 && errno == EINTR);
  if (r < 0) return Status::io_error(program_ + ": cannot wait for it: " + errno_text(errno));
  if (r == 0) return ok_status();  // WNOHANG: still running
  ExitStatus e;
  if (WIFEXITED(status)) e.code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) e.signal = WTERMSIG(status);
  e.user_cpu_seconds = static_cast<double>(usage.ru_utime.tv_sec) + usage.ru_utime.tv_usec * 1e-6;
  e.system_cpu_seconds = static_cast<double>(usage.ru_stime.tv_sec) + usage.ru_stime.tv_usec * 1e-6;
  e.max_rss_bytes = static_cast<int64_t>(usage.ru_maxrss) * 1024;  // Linux reports KiB
  exit_ = e;
  return ok_status();
}

Result<ExitStatus> Process::wait() {
  if (pid_ <= 0) return Status::failed_precondition("wait on a Process that was moved from");
  if (!exit_) KOI_RETURN_IF_ERROR(reap(0));
  return *exit_;
}

Result<std::optional<ExitStatus>> Process::wait_for(std::chrono::milliseconds timeout) {
  if (pid_ <= 0) return Status::failed_precondition("wait_for on a Process that was moved from");
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    if (!exit_) KOI_RETURN_IF_ERROR(reap(WNOHANG));
    if (exit_) return exit_;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return std::optional<ExitStatus>();
    std::this_thread::sleep_for(std::min<std::chrono::steady_clock::duration>(kPollInterval, deadline - now));
  }
}

int64_t process_start_time(int pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  if (!f) return -1;
  std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  const size_t paren = text.rfind(')');
  if (paren == std::string::npos) return -1;
  std::istringstream rest(text.substr(paren + 2));
  std::string field;
  std::vector<std::string> fields;
  while (rest >> field) fields.push_back(field);
  // fields[0] is field 3 (state), so field 22 (starttime) is fields[19].
  if (fields.size() < 20 || fields[0] == "Z" || fields[0] == "X") return -1;
  return std::atoll(fields[19].c_str());
}

}  // namespace koi::process
