// Resource limits for a process tree, enforced by the best mechanism this machine offers,
// and what the tree used. The cluster's replica wrapper puts itself in a LimitGroup before
// it starts a replica, so the replica and everything it starts share the limits.
//
// Mechanisms, tried in order (mechanism() says which one holds):
//   cgroup-v2  /sys/fs/cgroup (or the unified mount) with the memory / cpu / pids
//              controllers enabled for children: memory.max, memory.swap.max = 0, cpu.max,
//              pids.max; OOM kills from memory.events, peak from memory.peak
//   cgroup-v1  the memory, cpu and pids hierarchies under /sys/fs/cgroup/<controller>:
//              memory.limit_in_bytes (+ memsw when swap accounting exists),
//              cpu.cfs_quota_us / cpu.cfs_period_us, pids.max; OOM kills from
//              memory.oom_control, peak from memory.max_usage_in_bytes
//   none       no writable cgroup hierarchy: nothing is enforced, and that is reported
//              (RLIMIT_AS is not used: it counts mapped model files and reserved, untouched
//              memory, and would kill programs that are within their real budget)
// A limit of 0 means none for that resource. Each group is a directory named by the caller
// (unique per replica) under a "koi" parent; remove() deletes it once its processes ended.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::process {

struct Limits {
  int64_t memory_bytes = 0;
  int64_t cpu_milli = 0;  // 1000 = one core's time per period
  int64_t max_pids = 0;
};

struct Usage {
  bool oom_killed = false;       // the kernel's OOM killer ended a process of the group
  int64_t peak_memory_bytes = 0;  // 0 when the mechanism cannot tell
};

class LimitGroup {
 public:
  // Creates the group `name` (a-z, 0-9, '-', '.') with `limits`. Never fails for want of
  // cgroups: the group then has mechanism() "none". Fails when a hierarchy exists and is
  // writable but refuses a limit (the message names the file).
  static Result<LimitGroup> create(const std::string& name, const Limits& limits);

  LimitGroup(LimitGroup&&) noexcept = default;
  LimitGroup& operator=(LimitGroup&&) noexcept = default;
  LimitGroup(const LimitGroup&) = delete;
  LimitGroup& operator=(const LimitGroup&) = delete;
  ~LimitGroup() = default;  // does not remove: processes may outlive the owner

  const std::string& mechanism() const { return mechanism_; }
  // Moves `pid` (and so its future children) into the group.
  Status add(pid_t pid);
  // Moves the calling process into the existing group `name` (what a launcher's child does
  // before it execs the limited command, so nothing runs outside the group).
  static Status join(const std::string& name);
  Usage usage() const;
  // Removes the group's directories; processes still in it keep it (Unavailable).
  Status remove();

 private:
  LimitGroup() = default;
  std::string mechanism_ = "none";
  std::vector<std::string> dirs_;  // v2: one; v1: one per controller used
};

}  // namespace koi::process
