#include "cluster/control_plane/replica_wrapper.h"

#include <csignal>
#include <unistd.h>

#include <cstdio>

#include "base/file.h"
#include "cluster/control_plane/local_executor.h"
#include "process/process.h"

namespace koi::cluster {
namespace {

void ignore_signal(int) {}

}  // namespace

int run_replica_wrapper(const std::string& exit_file, const std::string& pid_file, const std::vector<std::string>& argv) {
  if (!pid_file.empty()) {
    const std::string id = std::to_string(::getpid()) + ":" + std::to_string(process_start_time(::getpid())) + "\n";
    if (Status s = write_file_atomic(pid_file, id); !s.ok()) std::fprintf(stderr, "koi cluster exec: %s\n", s.message().c_str());
  }
  // A handler, not SIG_IGN: handlers are reset by exec, so the command gets the defaults.
  struct sigaction sa {};
  sa.sa_handler = ignore_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  process::LaunchOptions o;
  o.argv = argv;
  o.new_process_group = false;
  auto child = process::Process::launch(o);
  if (!child.ok()) {
    std::fprintf(stderr, "koi cluster exec: %s\n", child.status().message().c_str());
    (void)write_file_atomic(exit_file, "exit 127\n");
    return 127;
  }
  auto status = child->wait();
  if (!status.ok()) {
    std::fprintf(stderr, "koi cluster exec: %s\n", status.status().message().c_str());
    return 1;
  }
  const std::string record = status->signal != 0 ? "signal " + std::to_string(status->signal) + "\n"
                                                 : "exit " + std::to_string(status->code) + "\n";
  if (Status s = write_file_atomic(exit_file, record); !s.ok()) {
    std::fprintf(stderr, "koi cluster exec: %s\n", s.message().c_str());
  }
  return status->shell_code();
}

}  // namespace koi::cluster
