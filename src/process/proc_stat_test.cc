// stopped_processes(): a stopped child of a group is listed with its MPI rank, a running one
// is not; signal_name() and is_crash_signal().
#include "process/proc_stat.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>

#include <gtest/gtest.h>

#include "base/file.h"
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
  auto dir = make_temp_dir("koi-proc-stat");
  ASSERT_TRUE(dir.ok());
  const std::string pid_file = path_join(*dir, "rank.pid");
  // The "rank" in a session and group of its own under the shell, as mpirun starts ranks.
  LaunchOptions o;
  o.argv = {"/bin/sh", "-c", "OMPI_COMM_WORLD_RANK=3 setsid sleep 30 & echo $! > " + pid_file + "; wait"};
  auto p = Process::launch(o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  std::string text;
  for (int i = 0; i < 500 && text.find('\n') == std::string::npos; ++i, ::usleep(10000)) {
    auto t = read_file(pid_file);
    text = t.ok() ? *t : "";
  }
  const int rank_pid = std::atoi(text.c_str());
  ASSERT_GT(rank_pid, 0);
  EXPECT_TRUE(stopped_processes(p->pid()).empty());
  ASSERT_EQ(::kill(rank_pid, SIGSTOP), 0);
  std::vector<StoppedProcess> s = await_stopped(p->pid(), 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].pid, rank_pid);
  EXPECT_EQ(s[0].rank, 3);
  EXPECT_EQ(s[0].command, "sleep");
  EXPECT_EQ(describe(s[0]), "rank 3 (pid " + std::to_string(rank_pid) + ", sleep)");
  EXPECT_TRUE(stopped_processes(rank_pid + 1000000).empty());  // not in this tree
  ASSERT_TRUE(p->signal(SIGSTOP).ok());  // the shell, the tree's root, too
  EXPECT_EQ(await_stopped(p->pid(), 2).size(), 2u);
  ASSERT_TRUE(p->signal(SIGCONT).ok());
  ASSERT_EQ(::kill(rank_pid, SIGCONT), 0);
  EXPECT_TRUE(await_stopped(p->pid(), 0).empty());
  ::kill(rank_pid, SIGKILL);
  ASSERT_TRUE(p->signal_group(SIGKILL).ok());
  (void)p->wait();
  remove_all(*dir);
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
