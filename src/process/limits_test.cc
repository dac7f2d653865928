#include "process/limits.h"

#include <unistd.h>

#include <gtest/gtest.h>

#include "base/file.h"
#include "process/process.h"

namespace koi::process {
namespace {

// A child that waits for `go` before it allocates, so it is inside the group before it
// touches any memory: writes `mib` MiB (not calloc'ed zero pages: real, resident bytes).
ExitStatus run_in_group(LimitGroup& group, const std::string& dir, int mib) {
  const std::string go = path_join(dir, "go");
  LaunchOptions o;
  o.argv = {"/bin/sh", "-c",
            "while [ ! -e " + go + " ]; do sleep 0.01; done; exec python3 -c \"b = b'x' * (" + std::to_string(mib) +
                " << 20); print(len(b))\""};
  o.stdout_path = o.stderr_path = path_join(dir, "log");
  auto p = Process::launch(o);
  EXPECT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(group.add(p->pid()).ok());
  EXPECT_TRUE(write_file_atomic(go, "").ok());
  auto e = p->wait();
  EXPECT_TRUE(e.ok());
  return *e;
}

std::string group_name(const char* what) { return std::string("test-") + what + "-" + std::to_string(::getpid()); }

TEST(LimitGroup, MemoryLimitOomKillsAndReportsThePeak) {
  const std::string dir = *make_temp_dir("koi-limits");
  Limits limits;
  limits.memory_bytes = 64 << 20;
  auto group = LimitGroup::create(group_name("oom"), limits);
  ASSERT_TRUE(group.ok()) << group.status().message();
  if (group->mechanism() == "none") {
    // No cgroups here: nothing is enforced, and nothing is claimed.
    const ExitStatus e = run_in_group(*group, dir, 128);
    EXPECT_TRUE(e.success());
    EXPECT_FALSE(group->usage().oom_killed);
    EXPECT_EQ(group->usage().peak_memory_bytes, 0);
  } else {
    const ExitStatus over = run_in_group(*group, dir, 256);
    EXPECT_EQ(over.signal, SIGKILL) << over.describe();
    const Usage u = group->usage();
    EXPECT_TRUE(u.oom_killed);
    EXPECT_GT(u.peak_memory_bytes, 32 << 20);
    EXPECT_LE(u.peak_memory_bytes, limits.memory_bytes);
    EXPECT_TRUE(group->remove().ok());
  }
  remove_all(dir);
}

TEST(LimitGroup, WithinTheLimitRunsAndTheGroupIsRemoved) {
  const std::string dir = *make_temp_dir("koi-limits");
  Limits limits;
  limits.memory_bytes = 256 << 20;
  limits.cpu_milli = 500;
  auto group = LimitGroup::create(group_name("fits"), limits);
  ASSERT_TRUE(group.ok()) << group.status().message();
  const ExitStatus e = run_in_group(*group, dir, 16);
  EXPECT_TRUE(e.success()) << e.describe();
  EXPECT_FALSE(group->usage().oom_killed);
  if (group->mechanism() != "none") EXPECT_GE(group->usage().peak_memory_bytes, 16 << 20);
  EXPECT_TRUE(group->remove().ok());
  // Gone: a second removal finds nothing to remove, and joining it moves nobody.
  EXPECT_TRUE(group->remove().ok());
  remove_all(dir);
}

TEST(LimitGroup, CpuQuotaIsWrittenAsPeriodAndShare) {
  Limits limits;
  limits.cpu_milli = 1500;
  const std::string name = group_name("cpu");
  auto group = LimitGroup::create(name, limits);
  ASSERT_TRUE(group.ok()) << group.status().message();
  if (group->mechanism() == "cgroup-v1") {
    EXPECT_EQ(*read_file("/sys/fs/cgroup/cpu/koi/" + name + "/cpu.cfs_quota_us"), "150000\n");
    EXPECT_EQ(*read_file("/sys/fs/cgroup/cpu/koi/" + name + "/cpu.cfs_period_us"), "100000\n");
  } else if (group->mechanism() == "cgroup-v2") {
    const std::string root = file_exists("/sys/fs/cgroup/cgroup.controllers") ? "/sys/fs/cgroup" : "/sys/fs/cgroup/unified";
    EXPECT_EQ(*read_file(root + "/koi/" + name + "/cpu.max"), "150000 100000\n");
  }
  EXPECT_TRUE(group->remove().ok());
}

}  // namespace
}  // namespace koi::process
