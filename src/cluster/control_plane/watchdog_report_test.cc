#include "cluster/control_plane/watchdog_report.h"

#include <gtest/gtest.h>

namespace koi::cluster {
namespace {

// The tail of a 2-rank job's log after rank 1 was stopped (koi train's error line, then
// mpirun's notice of the abort), as tests/train_mpi_watchdog.sh sees it.
constexpr std::string_view kLog =
    "step 41 | loss 2.5102 | 11.2 ms\n"
    "koi train: watchdog: rank 0 step 42: collective 'allreduce grads bucket 3' did not complete within 3 s; "
    "not responding: rank 1\n"
    "--------------------------------------------------------------------------\n"
    "MPI_ABORT was invoked on rank 0 in communicator MPI_COMM_WORLD\n"
    "  Proc: [[5310,1],0]\n  Errorcode: 75\n";

TEST(WatchdogReportTest, FindsTheReportBehindAPrefix) {
  EXPECT_EQ(find_watchdog_report(kLog),
            "watchdog: rank 0 step 42: collective 'allreduce grads bucket 3' did not complete within 3 s; "
            "not responding: rank 1");
}

TEST(WatchdogReportTest, TheLastReportWins) {
  const std::string log =
      "watchdog: rank 0 step 1: collective 'barrier' did not complete within 1 s; not responding: rank 2\r\n"
      "watchdog: rank 1 step 3: collective 'allgather params' did not complete within 0.05 s; a peer rank is not "
      "responding\nbye\n";
  EXPECT_EQ(find_watchdog_report(log),
            "watchdog: rank 1 step 3: collective 'allgather params' did not complete within 0.05 s; a peer rank is "
            "not responding");
}

TEST(WatchdogReportTest, NothingElseIsAReport) {
  EXPECT_FALSE(find_watchdog_report("").has_value());
  EXPECT_FALSE(find_watchdog_report("step 3 | loss 2.5\n").has_value());
  // The trainer's start-up line names the watchdog but reports nothing.
  EXPECT_FALSE(find_watchdog_report("watchdog: rank 0 armed with 60 s per collective\n").has_value());
}

}  // namespace
}  // namespace koi::cluster
