#include "process/replica_wrapper.h"

#include <fmt/format.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <optional>
#include <sstream>

#include "base/file.h"
#include "process/limits.h"
#include "process/process.h"

namespace koi::process {
namespace {

void ignore_signal(int) {}

void warn(const std::string& message) { std::fprintf(stderr, "koi-exec: %s\n", message.c_str()); }

// The limit group for this replica, and the argv that runs the command inside it; nullopt
// (and the plain argv) without limits.
std::optional<LimitGroup> limit_group(const WrapperOptions& o, std::vector<std::string>* argv) {
  *argv = o.argv;
  if (o.memory_mib <= 0 && o.cpu_milli <= 0) return std::nullopt;
  Limits limits;
  limits.memory_bytes = o.memory_mib << 20;
  limits.cpu_milli = o.cpu_milli;
  const std::string name = fmt::format("replica-{}-{}", ::getpid(), process_start_time(::getpid()));
  auto group = LimitGroup::create(name, limits);
  if (!group.ok()) {
    warn("limits not enforced: " + group.status().message());
    return std::nullopt;
  }
  if (group->mechanism() == "none") return std::move(*group);
  if (o.join_command.empty()) {
    warn("limits not enforced: no join command given");
    (void)group->remove();
    return std::nullopt;
  }
  *argv = o.join_command;
  argv->insert(argv->end(), {"--group", name, "--"});
  argv->insert(argv->end(), o.argv.begin(), o.argv.end());
  return std::move(*group);
}

}  // namespace

std::string format_exit_record(const ExitRecord& r) {
  std::string out = r.signal != 0 ? fmt::format("signal {}\n", r.signal) : fmt::format("exit {}\n", r.code);
  if (r.oom_killed) out += "oom-killed\n";
  if (r.peak_memory_bytes > 0) out += fmt::format("peak-memory-bytes {}\n", r.peak_memory_bytes);
  if (!r.limits.empty()) out += "limits " + r.limits + "\n";
  return out;
}

bool parse_exit_record(const std::string& text, ExitRecord* r) {
  *r = ExitRecord{};
  std::istringstream in(text);
  std::string word;
  long long v = 0;
  if (!(in >> word >> v) || (word != "exit" && word != "signal")) return false;
  (word == "exit" ? r->code : r->signal) = static_cast<int>(v);
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, value;
    fields >> key >> value;
    if (key == "oom-killed") r->oom_killed = true;
    if (key == "peak-memory-bytes") r->peak_memory_bytes = std::atoll(value.c_str());
    if (key == "limits") r->limits = value;
  }
  return true;
}

int run_replica_wrapper(const WrapperOptions& o) {
  if (!o.pid_file.empty()) {
    const std::string id = std::to_string(::getpid()) + ":" + std::to_string(process_start_time(::getpid())) + "\n";
    if (Status s = write_file_atomic(o.pid_file, id); !s.ok()) warn(s.message());
  }
  // A handler, not SIG_IGN: handlers are reset by exec, so the command gets the defaults.
  struct sigaction sa {};
  sa.sa_handler = ignore_signal;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) sigaction(sig, &sa, nullptr);
  LaunchOptions lo;
  std::optional<LimitGroup> group = limit_group(o, &lo.argv);
  lo.new_process_group = false;
  auto child = Process::launch(lo);
  if (!child.ok()) {
    warn(child.status().message());
    (void)write_file_atomic(o.exit_file, "exit 127\n");
    return 127;
  }
  auto status = child->wait();
  if (!status.ok()) {
    warn(status.status().message());
    return 1;
  }
  ExitRecord record;
  record.code = status->code;
  record.signal = status->signal;
  if (group) {
    const Usage usage = group->usage();
    record.oom_killed = usage.oom_killed;
    record.peak_memory_bytes = usage.peak_memory_bytes;
    record.limits = group->mechanism();
    if (Status s = group->remove(); !s.ok()) warn(s.message());
  }
  if (Status s = write_file_atomic(o.exit_file, format_exit_record(record)); !s.ok()) warn(s.message());
  return status->shell_code();
}

std::vector<std::string> wrapper_command(const std::string& koi_binary) {
  const std::string light = (std::filesystem::path(koi_binary).parent_path() / "koi-exec").string();
  if (::access(light.c_str(), X_OK) == 0) return {light};
  return {koi_binary, "cluster", "exec"};
}

int run_join(const std::string& group, const std::vector<std::string>& argv) {
  if (Status s = LimitGroup::join(group); !s.ok()) {
    std::fprintf(stderr, "koi-exec join: %s\n", s.message().c_str());
    return 127;
  }
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  ::execvp(args[0], args.data());
  std::fprintf(stderr, "koi-exec join: cannot run %s: %s\n", argv[0].c_str(), std::strerror(errno));
  return 127;
}

}  // namespace koi::process
