#include "base/host_usage.h"

#include <gtest/gtest.h>

#include <thread>

namespace koi::host {
namespace {

// A /proc/stat captured on a 2-CPU Linux 6.1 machine (the first lines).
constexpr std::string_view kStat =
    "cpu  10132153 290696 3084719 46828483 16683 0 25195 0 0 0\n"
    "cpu0 1393052 199554 502711 5627434 1720 0 20432 0 0 0\n"
    "intr 1 2 3\n";

TEST(HostUsageTest, ProcStatSplitsBusyFromIdleAndIowait) {
  const std::optional<CpuTimes> t = parse_proc_stat(kStat);
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->busy, 10132153u + 290696 + 3084719 + 0 + 25195 + 0);
  EXPECT_EQ(t->total, t->busy + 46828483 + 16683);
}

TEST(HostUsageTest, ProcStatNeedsTheAggregateLine) {
  EXPECT_FALSE(parse_proc_stat("cpu0 1 2 3 4 5 6 7 8\n").has_value());  // per-CPU lines only
  EXPECT_FALSE(parse_proc_stat("cpu  1 2 x 4\n").has_value());
  EXPECT_FALSE(parse_proc_stat("").has_value());
  const std::optional<CpuTimes> old_kernel = parse_proc_stat("cpu  1 2 3 4\n");  // four fields: idle last
  ASSERT_TRUE(old_kernel.has_value());
  EXPECT_EQ(old_kernel->busy, 6u);
  EXPECT_EQ(old_kernel->total, 10u);
}

TEST(HostUsageTest, UtilizationIsTheBusyShareOfTheJiffiesBetweenReadings) {
  EXPECT_DOUBLE_EQ(*cpu_utilization({100, 400}, {175, 500}), 0.75);
  EXPECT_DOUBLE_EQ(*cpu_utilization({100, 400}, {100, 500}), 0.0);
  EXPECT_FALSE(cpu_utilization({100, 400}, {100, 400}).has_value());  // no time passed
  EXPECT_FALSE(cpu_utilization({100, 400}, {90, 500}).has_value());   // not a later reading
}

TEST(HostUsageTest, MeminfoFieldsInBytes) {
  const std::string_view text =
      "MemTotal:       24576000 kB\nMemFree:        20000000 kB\nMemAvailable:   22000000 kB\n";
  EXPECT_EQ(meminfo_bytes(text, "MemTotal"), 24576000LL * 1024);
  EXPECT_EQ(meminfo_bytes(text, "MemAvailable"), 22000000LL * 1024);
  EXPECT_EQ(meminfo_bytes(text, "Available"), -1);  // a key starts a line
  EXPECT_EQ(meminfo_bytes("MemTotal: 5\n", "MemTotal"), -1);
  EXPECT_EQ(meminfo_bytes("MemTotal: many kB\n", "MemTotal"), -1);
}

TEST(HostUsageTest, LoadAverage) {
  EXPECT_DOUBLE_EQ(*parse_loadavg("7.25 3.10 1.00 3/812 4242\n"), 7.25);
  EXPECT_FALSE(parse_loadavg("busy\n").has_value());
}

// nvidia-smi --query-gpu=index,name,utilization.gpu,memory.used,memory.total
// --format=csv,noheader,nounits, as an 8-GPU H100 node prints it (first two lines).
TEST(HostUsageTest, NvidiaSmiCsv) {
  auto gpus = parse_nvidia_smi("0, NVIDIA H100 80GB HBM3, 37, 1024, 81559\n1, NVIDIA H100 80GB HBM3, 0, 4, 81559\n");
  ASSERT_TRUE(gpus.ok()) << gpus.status().message();
  ASSERT_EQ(gpus->size(), 2u);
  EXPECT_EQ((*gpus)[0].index, 0);
  EXPECT_EQ((*gpus)[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_DOUBLE_EQ((*gpus)[0].utilization, 0.37);
  EXPECT_EQ((*gpus)[0].memory_used_bytes, 1024LL << 20);
  EXPECT_EQ((*gpus)[1].memory_total_bytes, 81559LL << 20);
  EXPECT_TRUE(parse_nvidia_smi("").ok());  // no devices
}

TEST(HostUsageTest, NvidiaSmiFieldItCannotReadIsAnErrorNotZero) {
  auto gpus = parse_nvidia_smi("0, NVIDIA A100-SXM4-40GB MIG 1g.5gb, [N/A], 10, 40960\n");
  ASSERT_FALSE(gpus.ok());
  EXPECT_EQ(gpus.status().message(),
            "nvidia-smi reports utilization.gpu '[N/A]' for GPU 0 (line '0, NVIDIA A100-SXM4-40GB MIG 1g.5gb, [N/A], "
            "10, 40960'): not a number");
  EXPECT_FALSE(parse_nvidia_smi("0, GPU, 3\n").ok());
}

// This machine's /proc: a reading that is later by some time and a busy thread shows busy
// jiffies; memory in use lies between 0 and the total.
TEST(HostUsageTest, ReadsThisMachine) {
  const std::optional<CpuTimes> before = read_cpu_times();
  ASSERT_TRUE(before.has_value());
  std::thread spin([] {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
    while (std::chrono::steady_clock::now() < end) {
    }
  });
  spin.join();
  const std::optional<CpuTimes> after = read_cpu_times();
  ASSERT_TRUE(after.has_value());
  const std::optional<double> u = cpu_utilization(*before, *after);
  ASSERT_TRUE(u.has_value());
  EXPECT_GT(*u, 0.0);
  EXPECT_LE(*u, 1.0);
  const int64_t total = read_meminfo_bytes("MemTotal"), available = read_meminfo_bytes("MemAvailable");
  EXPECT_GT(total, 0);
  EXPECT_GT(available, 0);
  EXPECT_LE(available, total);
  EXPECT_TRUE(read_load_average().has_value());
}

}  // namespace
}  // namespace koi::host
