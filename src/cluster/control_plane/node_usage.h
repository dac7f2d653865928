// NodeUsage: what a node is measured to use (not what plan() has allocated on it): CPU
// utilisation, load, memory in use and, where nvidia-smi answers, each GPU's utilisation and
// memory. An executor samples its nodes (Executor::usage()): the local executor this machine
// (HostSampler below, every declared node being this machine), the Slurm executor what
// slurmd reports through `scontrol show node`. The API puts it on each Node's status, the
// reconciler exports it as koi_cluster_node_* gauges (export_node_usage), and the console
// charts it. A figure that was not measured is absent, never zero.
//
// HostSampler samples this machine on a thread of its own every `interval` (so a slow
// nvidia-smi never stalls a reconcile round) and keeps the last `capacity` samples. Its
// methods are thread-safe; the destructor stops the thread (waiting at most one sample).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <boost/json.hpp>

#include "base/host_usage.h"
#include "base/metrics.h"

namespace koi::cluster {

struct NodeUsage {
  double time = 0;                        // unix seconds of the sample
  std::string source;                     // how it was measured: "/proc", "scontrol"
  std::optional<double> cpu_utilization;  // busy fraction (0 to 1) of all CPUs since the last sample
  std::optional<double> load_average;     // 1 minute
  int64_t memory_used_bytes = -1;         // -1: not measured
  int64_t memory_total_bytes = -1;
  std::vector<host::GpuUsage> gpus;
  std::string gpu_note;                   // why there are no GPU figures: "no GPU (nvidia-smi not found)"
};

// How many samples an executor keeps per node, and how often the local one samples.
inline constexpr size_t kNodeUsageHistory = 120;
inline constexpr double kNodeUsageIntervalSeconds = 1.0;

class HostSampler {
 public:
  // `nvidia_smi`: the program asked for GPU figures ("" asks none: "no GPU (not asked)").
  HostSampler(double interval_seconds, size_t capacity, std::string nvidia_smi = "nvidia-smi");
  ~HostSampler();
  HostSampler(const HostSampler&) = delete;
  HostSampler& operator=(const HostSampler&) = delete;

  // The last `max_samples` samples, oldest first (the first one is taken before the
  // constructor returns; its CPU utilisation is absent: it needs two readings).
  std::vector<NodeUsage> samples(size_t max_samples) const;

 private:
  NodeUsage sample();
  // nvidia-smi's devices into `out`, or the note that says why there are none.
  void sample_gpus(NodeUsage* out);
  void loop();

  const double interval_seconds_;
  const size_t capacity_;
  const std::string nvidia_smi_;
  std::string scratch_dir_;                  // nvidia-smi's output; the sampler thread's
  std::optional<host::CpuTimes> last_cpu_;   // the sampler thread's
  bool gpu_missing_ = false;                 // nvidia-smi not found: not asked again
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;              // guarded by mu_
  std::deque<NodeUsage> history_;  // guarded by mu_
  std::thread thread_;
};

// status.usage of a Node in the API (and `history`: the samples' time, CPU and memory
// figures, for the console's chart).
boost::json::value node_usage_json(const std::vector<NodeUsage>& samples);

// Declares the koi_cluster_node_* gauges on `registry`; sets them from `usage` (a node's
// newest sample), leaving out the figures it has not measured.
void declare_node_usage_metrics(metrics::Registry& registry);
void export_node_usage(metrics::Registry& registry, const std::string& node, const NodeUsage& usage);

}  // namespace koi::cluster
