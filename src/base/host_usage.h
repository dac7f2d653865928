// Host usage: how busy this machine is, from what Linux and the NVIDIA driver already report.
//   CPU     /proc/stat's aggregate "cpu" line: jiffies per state since boot; utilisation is
//           the busy share of the jiffies between two readings (idle and iowait are idle).
//   memory  /proc/meminfo: in use = MemTotal - MemAvailable (what `free` calls used).
//   load    /proc/loadavg's 1-minute figure.
//   GPUs    `nvidia-smi --query-gpu=<kNvidiaSmiQuery> --format=csv,noheader,nounits`, one
//           line per device.
// The parsers are pure functions over the text (tested on captured output); the readers
// read this machine's files. Nothing here runs a program: a caller that wants GPU figures runs
// nvidia-smi (cluster/control_plane/node_usage.h) and parses its output here. No figure is
// ever invented: a field that cannot be read is absent (nullopt, -1 or an error naming it).
// Thread-safe (no state).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace koi::host {

// Jiffies of all CPUs since boot.
struct CpuTimes {
  uint64_t busy = 0;   // user + nice + system + irq + softirq + steal
  uint64_t total = 0;  // busy + idle + iowait
};

// The aggregate "cpu " line of /proc/stat's text; nullopt when it is missing or malformed.
std::optional<CpuTimes> parse_proc_stat(std::string_view text);
// The busy fraction (0 to 1) of the jiffies between two readings; nullopt when none passed.
std::optional<double> cpu_utilization(const CpuTimes& before, const CpuTimes& after);

// The value of `key` ("MemAvailable") in /proc/meminfo's text, in bytes; -1 when the line is
// missing or is not "KEY: N kB".
int64_t meminfo_bytes(std::string_view meminfo, std::string_view key);

// The first field of /proc/loadavg's text; nullopt when malformed.
std::optional<double> parse_loadavg(std::string_view text);

// One device as nvidia-smi reports it.
struct GpuUsage {
  int index = 0;
  std::string name;            // "NVIDIA H200"
  double utilization = 0;      // busy fraction (0 to 1) over nvidia-smi's last sample period
  int64_t memory_used_bytes = 0;
  int64_t memory_total_bytes = 0;
};

// The fields asked of nvidia-smi, in the order parse_nvidia_smi reads them.
inline constexpr std::string_view kNvidiaSmiQuery = "index,name,utilization.gpu,memory.used,memory.total";
// nvidia-smi's CSV (noheader, nounits: MiB and percent) -> devices. A line with a field
// nvidia-smi could not read ("[N/A]", "[Not Supported]") is an error naming the field: a
// figure it does not have is not reported as zero.
Result<std::vector<GpuUsage>> parse_nvidia_smi(std::string_view csv);

// This machine's figures now (reads /proc); nullopt or -1 where the file cannot be read.
std::optional<CpuTimes> read_cpu_times();
int64_t read_meminfo_bytes(std::string_view key);
std::optional<double> read_load_average();

}  // namespace koi::host
