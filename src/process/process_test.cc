#include "process/process.h"

#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>

#include "base/file.h"

namespace koi::process {
namespace {

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = *make_temp_dir("koi-process"); }
  void TearDown() override { remove_all(dir_); }
  std::string path(const std::string& name) const { return path_join(dir_, name); }
  std::string contents(const std::string& name) const {
    auto text = read_file(path(name));
    return text.ok() ? *text : "";
  }

  // Runs `script` under /bin/sh (stdout to the file "out" unless `o` says otherwise) and
  // returns how it ended.
  ExitStatus run_sh(const std::string& script, LaunchOptions o = {}) {
    o.argv = {"/bin/sh", "-c", script};
    if (o.stdout_path.empty()) o.stdout_path = path("out");
    auto p = Process::launch(o);
    EXPECT_TRUE(p.ok()) << p.status().message();
    auto e = p->wait();
    EXPECT_TRUE(e.ok()) << e.status().message();
    return *e;
  }

  // Blocks until the file `name` holds a whole line (a child saying it is ready).
  void await_line(const std::string& name) const {
    while (contents(name).find('\n') == std::string::npos) ::usleep(10000);
  }
  std::string dir_;
};

TEST_F(ProcessTest, ExitCodeAndTerminatingSignal) {
  ExitStatus e = run_sh("exit 3");
  EXPECT_EQ(e.code, 3);
  EXPECT_EQ(e.signal, 0);
  EXPECT_FALSE(e.success());
  EXPECT_EQ(e.describe(), "exited with status 3");
  e = run_sh("kill -TERM $$");
  EXPECT_EQ(e.code, 0);
  EXPECT_EQ(e.signal, SIGTERM);
  EXPECT_EQ(e.shell_code(), 128 + SIGTERM);
  EXPECT_EQ(e.describe(), "killed by signal 15 (Terminated)");
  EXPECT_TRUE(run_sh("true").success());
}

TEST_F(ProcessTest, StdoutAndStderrGoToTheirLogFilesAppended) {
  LaunchOptions o;
  o.stdout_path = path("out"), o.stderr_path = path("err");
  run_sh("echo one; echo two >&2", o);
  run_sh("echo three", o);
  EXPECT_EQ(contents("out"), "one\nthree\n");
  EXPECT_EQ(contents("err"), "two\n");
  o.stdout_path = o.stderr_path = path("both");
  run_sh("echo a; echo b >&2; echo c", o);
  EXPECT_EQ(contents("both"), "a\nb\nc\n");
}

TEST_F(ProcessTest, EnvironmentIsInheritedWithOverridesOrExact) {
  ASSERT_EQ(::setenv("KOI_PROCESS_TEST_INHERITED", "inherited", 1), 0);
  LaunchOptions o;
  o.env = {{"KOI_PROCESS_TEST_SET", "set"}, {"HOME", "/nowhere"}};
  run_sh("echo \"$KOI_PROCESS_TEST_INHERITED $KOI_PROCESS_TEST_SET $HOME\"", o);
  EXPECT_EQ(contents("out"), "inherited set /nowhere\n");

  LaunchOptions exact;
  exact.argv = {"/usr/bin/env"};
  exact.inherit_env = false;
  exact.env = {{"A", "1"}, {"B", "two words"}};
  exact.stdout_path = path("env");
  auto p = Process::launch(exact);
  ASSERT_TRUE(p.ok()) << p.status().message();
  ASSERT_TRUE(p->wait()->success());
  EXPECT_EQ(contents("env"), "A=1\nB=two words\n");
}

TEST_F(ProcessTest, RunsInTheGivenWorkingDirectory) {
  std::filesystem::create_directory(path("work"));
  LaunchOptions o;
  o.cwd = path("work");
  run_sh("pwd; echo x > made-here", o);
  EXPECT_EQ(contents("out"), std::filesystem::canonical(path("work")).string() + "\n");
  EXPECT_TRUE(file_exists(path("work/made-here")));
}

TEST_F(ProcessTest, ProgramWithoutASlashIsSearchedInPath) {
  LaunchOptions o;
  o.argv = {"sh", "-c", "exit 4"};
  auto p = Process::launch(o);
  ASSERT_TRUE(p.ok()) << p.status().message();
  EXPECT_EQ(p->wait()->code, 4);
}

TEST_F(ProcessTest, UnhappyLaunchesNameTheProblem) {
  LaunchOptions o;
  o.argv = {"koi-no-such-program"};
  auto p = Process::launch(o);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.status().message(), "koi-no-such-program: program not found in PATH; install it or pass its full path");

  o.argv = {"/nonexistent/prog"};
  EXPECT_EQ(Process::launch(o).status().message(), "/nonexistent/prog: cannot run it: No such file or directory");

  o.argv = {"/bin/true"};
  o.cwd = path("missing");
  p = Process::launch(o);
  EXPECT_EQ(p.status().code(), StatusCode::kNotFound);
  EXPECT_EQ(p.status().message(), "/bin/true: the working directory " + path("missing") + " does not exist");

  o.cwd = "";
  o.stdout_path = path("missing/out.log");
  EXPECT_EQ(Process::launch(o).status().message(),
            path("missing/out.log") + ": cannot open the log file: No such file or directory");

  EXPECT_EQ(Process::launch({}).status().message(), "cannot launch an empty command line");
}

TEST_F(ProcessTest, PollAndTimedWaitReportARunningChild) {
  LaunchOptions o;
  o.argv = {"sleep", "30"};
  auto p = Process::launch(o);
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->running());
  auto polled = p->wait_for(std::chrono::milliseconds(0));
  ASSERT_TRUE(polled.ok());
  EXPECT_FALSE(polled->has_value());
  EXPECT_FALSE(p->wait_for(std::chrono::milliseconds(20))->has_value());
  ASSERT_TRUE(p->signal(SIGTERM).ok());
  auto ended = p->wait_for(std::chrono::minutes(1));
  ASSERT_TRUE(ended.ok() && ended->has_value());
  EXPECT_EQ((*ended)->signal, SIGTERM);
  EXPECT_FALSE(p->running());
  EXPECT_EQ(p->wait()->signal, SIGTERM);  // asked again: the same answer
  EXPECT_EQ(p->signal(SIGTERM).code(), StatusCode::kFailedPrecondition);
}

// A child that ignores SIGTERM, and its own child (in the same group), both end on
// kill_group().
TEST_F(ProcessTest, KillGroupEndsAChildThatIgnoresSigtermAndItsChildren) {
  LaunchOptions o;
  o.argv = {"/bin/sh", "-c", "trap '' TERM; sleep 30 & echo $! > " + path("grandchild") + "; echo ready; wait"};
  o.stdout_path = path("out");
  auto p = Process::launch(o);
  ASSERT_TRUE(p.ok());
  await_line("out");
  ASSERT_TRUE(p->signal_group(SIGTERM).ok());
  EXPECT_FALSE(p->wait_for(std::chrono::milliseconds(50))->has_value());
  ASSERT_TRUE(p->kill_group().ok());
  EXPECT_EQ(p->wait()->signal, SIGKILL);
  const pid_t grandchild = std::atoi(contents("grandchild").c_str());
  ASSERT_GT(grandchild, 0);
  // SIGKILL was sent to it; it is gone once its new parent has reaped it, or a zombie.
  for (;;) {
    auto stat_file = read_file("/proc/" + std::to_string(grandchild) + "/stat");
    const std::string stat = stat_file.ok() ? *stat_file : "";
    if (::kill(grandchild, 0) != 0 || stat.find(") Z ") != std::string::npos) break;
    ::usleep(10000);
  }
}

TEST_F(ProcessTest, ResourceUsageIsReported) {
  const ExitStatus e = run_sh("i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done");
  EXPECT_TRUE(e.success());
  EXPECT_GT(e.user_cpu_seconds + e.system_cpu_seconds, 0.0);
  EXPECT_GT(e.max_rss_bytes, 0);
}

TEST_F(ProcessTest, DestroyingARunningProcessKillsAndReapsIt) {
  pid_t pid = -1;
  {
    LaunchOptions o;
    o.argv = {"sleep", "30"};
    auto p = Process::launch(o);
    ASSERT_TRUE(p.ok());
    pid = p->pid();
    Process moved = std::move(*p);  // ownership moves; the moved-from one does nothing
    EXPECT_EQ(moved.pid(), pid);
  }
  EXPECT_EQ(::kill(pid, 0), -1);
  EXPECT_EQ(errno, ESRCH);
}

TEST_F(ProcessTest, ChildIsTheLeaderOfItsOwnProcessGroup) {
  const ExitStatus e = run_sh("cut -d' ' -f5 /proc/$$/stat; echo $$");
  ASSERT_TRUE(e.success());
  const std::string text = contents("out");
  const size_t nl = text.find('\n');
  EXPECT_EQ(text.substr(0, nl + 1), text.substr(nl + 1));
}

TEST_F(ProcessTest, ChildCanStayInTheParentsProcessGroup) {
  LaunchOptions o;
  o.new_process_group = false;
  const ExitStatus e = run_sh("cut -d' ' -f5 /proc/$$/stat", o);
  ASSERT_TRUE(e.success());
  EXPECT_EQ(contents("out"), std::to_string(::getpgrp()) + "\n");
}

TEST_F(ProcessTest, DestroyingARunningChildInTheParentsGroupKillsIt) {
  LaunchOptions o;
  o.argv = {"/bin/sleep", "60"};
  o.new_process_group = false;
  pid_t pid = 0;
  {
    auto p = Process::launch(o);
    ASSERT_TRUE(p.ok()) << p.status().message();
    pid = p->pid();
  }  // destroyed while it runs: killed and reaped, not waited for for a minute
  EXPECT_NE(::kill(pid, 0), 0);
}

}  // namespace
}  // namespace koi::process
