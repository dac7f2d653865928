#include "process/limits.h"

#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/file.h"

namespace koi::process {
namespace {

constexpr int64_t kCpuPeriodUs = 100000;

std::string root_v2() {
  for (const char* root : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
    if (file_exists(std::string(root) + "/cgroup.controllers")) return root;
  }
  return "";
}

std::string first_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

bool has_word(const std::string& line, const std::string& word) {
  std::istringstream in(line);
  std::string w;
  while (in >> w) {
    if (w == word) return true;
  }
  return false;
}

Status write_value(const std::string& path, const std::string& value) {
  std::ofstream f(path);
  if (f) f << value;
  if (f) f.flush();
  if (!f) return Status::io_error(fmt::format("cannot write '{}' to {}: {}", value, path, std::strerror(errno)));
  return ok_status();
}

Status make_dir(const std::string& path) {
  if (::mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) {
    return Status::io_error(fmt::format("cannot create {}: {}", path, std::strerror(errno)));
  }
  return ok_status();
}

bool writable_dir(const std::string& path) { return is_directory(path) && ::access(path.c_str(), W_OK) == 0; }

// "key value" lines (memory.events, memory.oom_control): the value of `key`, or 0.
int64_t keyed_value(const std::string& path, const std::string& key) {
  std::ifstream f(path);
  std::string k;
  int64_t v = 0;
  while (f >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

int64_t number_in(const std::string& path) {
  const std::string line = first_line(path);
  return line.empty() ? 0 : std::atoll(line.c_str());
}

}  // namespace

Result<LimitGroup> LimitGroup::create(const std::string& name, const Limits& limits) {
  LimitGroup g;
  const std::string v2 = root_v2();
  const std::string controllers = v2.empty() ? "" : first_line(v2 + "/cgroup.subtree_control");
  const bool v2_usable = !v2.empty() && writable_dir(v2) && (limits.memory_bytes == 0 || has_word(controllers, "memory")) &&
                         (limits.cpu_milli == 0 || has_word(controllers, "cpu")) &&
                         (limits.max_pids == 0 || has_word(controllers, "pids"));
  if (v2_usable) {
    const std::string parent = v2 + "/koi";
    KOI_RETURN_IF_ERROR(make_dir(parent));
    // The parent passes the controllers on to the replicas' groups.
    std::string enable;
    for (const char* c : {"memory", "cpu", "pids"}) {
      if (has_word(controllers, c)) enable += std::string(enable.empty() ? "+" : " +") + c;
    }
    if (!enable.empty()) KOI_RETURN_IF_ERROR(write_value(parent + "/cgroup.subtree_control", enable));
    const std::string dir = parent + "/" + name;
    KOI_RETURN_IF_ERROR(make_dir(dir));
    g.mechanism_ = "cgroup-v2";
    g.dirs_ = {dir};
    if (limits.memory_bytes > 0) {
      KOI_RETURN_IF_ERROR(write_value(dir + "/memory.max", std::to_string(limits.memory_bytes)));
      if (file_exists(dir + "/memory.swap.max")) KOI_RETURN_IF_ERROR(write_value(dir + "/memory.swap.max", "0"));
    }
    if (limits.cpu_milli > 0) {
      KOI_RETURN_IF_ERROR(write_value(dir + "/cpu.max", fmt::format("{} {}", limits.cpu_milli * kCpuPeriodUs / 1000, kCpuPeriodUs)));
    }
    if (limits.max_pids > 0) KOI_RETURN_IF_ERROR(write_value(dir + "/pids.max", std::to_string(limits.max_pids)));
    return g;
  }
  // cgroup v1: one directory per controller that has a limit to keep (memory always, for the
  // OOM and peak report).
  struct V1 {
    const char* controller;
    bool wanted;
  };
  const V1 wanted[] = {{"memory", true}, {"cpu", limits.cpu_milli > 0}, {"pids", limits.max_pids > 0}};
  for (const V1& c : wanted) {
    const std::string root = std::string("/sys/fs/cgroup/") + c.controller;
    if (!c.wanted || !writable_dir(root)) continue;
    const std::string parent = root + "/koi";
    KOI_RETURN_IF_ERROR(make_dir(parent));
    const std::string dir = parent + "/" + name;
    KOI_RETURN_IF_ERROR(make_dir(dir));
    g.dirs_.push_back(dir);
    const std::string controller = c.controller;
    if (controller == "memory" && limits.memory_bytes > 0) {
      KOI_RETURN_IF_ERROR(write_value(dir + "/memory.limit_in_bytes", std::to_string(limits.memory_bytes)));
      if (file_exists(dir + "/memory.memsw.limit_in_bytes")) {
        KOI_RETURN_IF_ERROR(write_value(dir + "/memory.memsw.limit_in_bytes", std::to_string(limits.memory_bytes)));
      }
    } else if (controller == "cpu") {
      KOI_RETURN_IF_ERROR(write_value(dir + "/cpu.cfs_period_us", std::to_string(kCpuPeriodUs)));
      KOI_RETURN_IF_ERROR(write_value(dir + "/cpu.cfs_quota_us", std::to_string(limits.cpu_milli * kCpuPeriodUs / 1000)));
    } else if (controller == "pids") {
      KOI_RETURN_IF_ERROR(write_value(dir + "/pids.max", std::to_string(limits.max_pids)));
    }
  }
  if (!g.dirs_.empty()) g.mechanism_ = "cgroup-v1";
  return g;
}

Status LimitGroup::add(pid_t pid) {
  for (const std::string& dir : dirs_) KOI_RETURN_IF_ERROR(write_value(dir + "/cgroup.procs", std::to_string(pid)));
  return ok_status();
}

Status LimitGroup::join(const std::string& name) {
  std::vector<std::string> dirs;
  if (const std::string v2 = root_v2(); !v2.empty() && is_directory(v2 + "/koi/" + name)) {
    dirs.push_back(v2 + "/koi/" + name);
  } else {
    for (const char* c : {"memory", "cpu", "pids"}) {
      const std::string dir = std::string("/sys/fs/cgroup/") + c + "/koi/" + name;
      if (is_directory(dir)) dirs.push_back(dir);
    }
  }
  for (const std::string& dir : dirs) KOI_RETURN_IF_ERROR(write_value(dir + "/cgroup.procs", std::to_string(::getpid())));
  return ok_status();
}

Usage LimitGroup::usage() const {
  Usage u;
  for (const std::string& dir : dirs_) {
    if (mechanism_ == "cgroup-v2") {
      u.oom_killed = keyed_value(dir + "/memory.events", "oom_kill") > 0;
      u.peak_memory_bytes = number_in(dir + "/memory.peak");
    } else if (file_exists(dir + "/memory.oom_control")) {
      u.oom_killed = keyed_value(dir + "/memory.oom_control", "oom_kill") > 0;
      u.peak_memory_bytes = number_in(dir + "/memory.max_usage_in_bytes");
    }
  }
  return u;
}

Status LimitGroup::remove() {
  for (const std::string& dir : dirs_) {
    if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
      return Status::unavailable(fmt::format("cannot remove {}: {}", dir, std::strerror(errno)));
    }
  }
  return ok_status();
}

}  // namespace koi::process
