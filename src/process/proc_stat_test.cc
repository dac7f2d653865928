// stopped_processes(): a stopped child of a group is listed with its MPI rank, a running one
// is not; signal_name() and is_crash_signal().
#include "process/proc_stat.h"

#include <signal.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "process/process.h"

namespace koi::process {
namespace {

// Polls until stopped_processes(pgid) has `n` entries (a signal is delivered asynchronously).
std::vector<StoppedProcess> await_stopped(int pgid, size_t n) {
  std::vector<StoppedProcess> s;
  for (int i = 0; i < 500; ++i) {
    s = stopped_processes(pgid);
    if (s.size() == n) break;
    ::usleep(10000);
  }
  return s;
}

TEST(StoppedProcesses, AStoppedRankIsListedWithItsRankAndARunningOneIsNot) {
  LaunchOptions o;
  o.argv = {"/bin/sh", "-c", "sleep 30 & sleep 30 & wait"};
  o.env = {{"OMPI_COMM_WORLD_RANK", "3"}};
  auto p = Process::launch(o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_TRUE(stopped_processes(p->pid()).empty());
  ASSERT_TRUE(p->signal(SIGSTOP).ok());  // the shell only, not its sleeps
  std::vector<StoppedProcess> s = await_stopped(p->pid(), 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].pid, p->pid());
  EXPECT_EQ(s[0].rank, 3);
  EXPECT_EQ(s[0].command, "sh");
  EXPECT_EQ(describe(s[0]), "rank 3 (pid " + std::to_string(p->pid()) + ", sh)");
  EXPECT_TRUE(stopped_processes(p->pid() + 1000000).empty());  // another group
  ASSERT_TRUE(p->signal(SIGCONT).ok());
  EXPECT_TRUE(await_stopped(p->pid(), 0).empty());
  ASSERT_TRUE(p->signal_group(SIGKILL).ok());
  (void)p->wait();
}

TEST(StoppedProcesses, WithoutARankThePidAndCommandDescribeIt) {
  EXPECT_EQ(describe({42, -1, "python3"}), "pid 42 (python3)");
}

TEST(Signals, NamesAndCrashes) {
  EXPECT_EQ(signal_name(SIGSEGV), "SIGSEGV");
  EXPECT_EQ(signal_name(SIGKILL), "SIGKILL");
  EXPECT_EQ(signal_name(9999), "signal 9999");
  EXPECT_TRUE(is_crash_signal(SIGSEGV));
  EXPECT_TRUE(is_crash_signal(SIGABRT));
  EXPECT_FALSE(is_crash_signal(SIGKILL));
  EXPECT_FALSE(is_crash_signal(SIGTERM));
}

}  // namespace
}  // namespace koi::process
