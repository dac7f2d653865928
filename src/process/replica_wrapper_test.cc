#include "process/replica_wrapper.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>

#include "base/file.h"

namespace koi::process {
namespace {

TEST(ExitRecord, RoundTripsEveryField) {
  ExitRecord r;
  r.signal = 9;
  r.oom_killed = true;
  r.peak_memory_bytes = 123456;
  r.limits = "cgroup-v1";
  const std::string text = format_exit_record(r);
  EXPECT_EQ(text, "signal 9\noom-killed\npeak-memory-bytes 123456\nlimits cgroup-v1\n");
  ExitRecord back;
  ASSERT_TRUE(parse_exit_record(text, &back));
  EXPECT_EQ(back.signal, 9);
  EXPECT_EQ(back.code, 0);
  EXPECT_TRUE(back.oom_killed);
  EXPECT_EQ(back.peak_memory_bytes, 123456);
  EXPECT_EQ(back.limits, "cgroup-v1");
  ASSERT_TRUE(parse_exit_record("exit 3\nsomething-newer 1\n", &back));
  EXPECT_EQ(back.code, 3);
  EXPECT_FALSE(parse_exit_record("", &back));
  EXPECT_FALSE(parse_exit_record("exited 3\n", &back));
}

TEST(WrapperCommand, PrefersKoiExecBesideTheBinaryElseKoiClusterExec) {
  const std::string dir = ::testing::TempDir() + "/wrapper-command";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string koi = dir + "/koi";
  EXPECT_EQ(wrapper_command(koi), (std::vector<std::string>{koi, "cluster", "exec"}));
  ASSERT_TRUE(write_file_atomic(dir + "/koi-exec", "#!/bin/sh\n").ok());
  EXPECT_EQ(wrapper_command(koi), (std::vector<std::string>{koi, "cluster", "exec"}));  // not executable
  ::chmod((dir + "/koi-exec").c_str(), 0755);
  EXPECT_EQ(wrapper_command(koi), (std::vector<std::string>{dir + "/koi-exec"}));
}

}  // namespace
}  // namespace koi::process
