#include "cluster/control_plane/node_usage.h"

#include <chrono>

#include <fmt/format.h>

#include "base/file.h"
#include "base/logging.h"
#include "process/process.h"

namespace koi::cluster {
namespace json = boost::json;
namespace {

constexpr double kNvidiaSmiTimeoutSeconds = 5;

double unix_now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

}  // namespace

HostSampler::HostSampler(double interval_seconds, size_t capacity, std::string nvidia_smi)
    : interval_seconds_(interval_seconds), capacity_(capacity), nvidia_smi_(std::move(nvidia_smi)) {
  history_.push_back(sample());
  thread_ = std::thread([this] { loop(); });
}

HostSampler::~HostSampler() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
  if (!scratch_dir_.empty()) remove_all(scratch_dir_);
}

std::vector<NodeUsage> HostSampler::samples(size_t max_samples) const {
  std::lock_guard<std::mutex> lock(mu_);
  const size_t n = std::min(max_samples, history_.size());
  return std::vector<NodeUsage>(history_.end() - static_cast<std::ptrdiff_t>(n), history_.end());
}

void HostSampler::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  const auto interval = std::chrono::duration<double>(interval_seconds_);
  while (!cv_.wait_for(lock, interval, [this] { return stop_; })) {
    lock.unlock();
    NodeUsage s = sample();
    lock.lock();
    history_.push_back(std::move(s));
    while (history_.size() > capacity_) history_.pop_front();
  }
}

NodeUsage HostSampler::sample() {
  NodeUsage s;
  s.time = unix_now();
  s.source = "/proc";
  const std::optional<host::CpuTimes> cpu = host::read_cpu_times();
  if (cpu && last_cpu_) s.cpu_utilization = host::cpu_utilization(*last_cpu_, *cpu);
  if (cpu) last_cpu_ = cpu;
  s.load_average = host::read_load_average();
  const int64_t total = host::read_meminfo_bytes("MemTotal"), available = host::read_meminfo_bytes("MemAvailable");
  if (total > 0 && available >= 0) {
    s.memory_total_bytes = total;
    s.memory_used_bytes = total - available;
  }
  sample_gpus(&s);
  return s;
}

void HostSampler::sample_gpus(NodeUsage* out) {
  if (nvidia_smi_.empty()) {
    out->gpu_note = "no GPU (not asked)";
    return;
  }
  if (gpu_missing_) {
    out->gpu_note = "no GPU (nvidia-smi not found)";
    return;
  }
  if (scratch_dir_.empty()) {
    auto dir = make_temp_dir("koi-node-usage");
    if (!dir.ok()) {
      out->gpu_note = "no GPU figures: " + dir.status().message();
      return;
    }
    scratch_dir_ = *dir;
  }
  process::LaunchOptions o;
  o.argv = {nvidia_smi_, fmt::format("--query-gpu={}", host::kNvidiaSmiQuery), "--format=csv,noheader,nounits"};
  o.stdout_path = path_join(scratch_dir_, "out");
  o.stderr_path = path_join(scratch_dir_, "err");
  remove_all(o.stdout_path);  // launch() appends
  remove_all(o.stderr_path);
  auto p = process::Process::launch(o);
  if (!p.ok()) {
    gpu_missing_ = p.status().code() == StatusCode::kNotFound;
    out->gpu_note = gpu_missing_ ? "no GPU (nvidia-smi not found)" : "no GPU figures: " + p.status().message();
    return;
  }
  const auto timeout = std::chrono::milliseconds(static_cast<int64_t>(kNvidiaSmiTimeoutSeconds * 1000));
  auto done = p->wait_for(timeout);
  if (!done.ok() || !done->has_value()) {
    (void)p->kill_group();
    (void)p->wait();
    out->gpu_note = fmt::format("no GPU figures: nvidia-smi did not answer within {:g} s", kNvidiaSmiTimeoutSeconds);
    return;
  }
  auto text = read_file(o.stdout_path);
  if (!(*done)->success()) {
    auto err = read_file(o.stderr_path);
    out->gpu_note = fmt::format("no GPU figures: nvidia-smi {}: {}", (*done)->describe(), err.ok() ? *err : "");
    while (!out->gpu_note.empty() && std::isspace(static_cast<unsigned char>(out->gpu_note.back()))) {
      out->gpu_note.pop_back();
    }
    return;
  }
  auto gpus = host::parse_nvidia_smi(text.ok() ? *text : "");
  if (!gpus.ok()) {
    out->gpu_note = "no GPU figures: " + gpus.status().message();
  } else if (gpus->empty()) {
    out->gpu_note = "no GPU (nvidia-smi lists none)";
  } else {
    out->gpus = std::move(*gpus);
  }
}

json::value node_usage_json(const std::vector<NodeUsage>& samples) {
  if (samples.empty()) return nullptr;
  const NodeUsage& u = samples.back();
  json::object o{{"time", u.time}, {"source", u.source}};
  if (u.cpu_utilization) o["cpuUtilization"] = *u.cpu_utilization;
  if (u.load_average) o["loadAverage"] = *u.load_average;
  if (u.memory_used_bytes >= 0) o["memoryUsedBytes"] = u.memory_used_bytes;
  if (u.memory_total_bytes >= 0) o["memoryTotalBytes"] = u.memory_total_bytes;
  json::array gpus;
  for (const host::GpuUsage& g : u.gpus) {
    gpus.push_back(json::object{{"index", g.index}, {"name", g.name}, {"utilization", g.utilization},
                                {"memoryUsedBytes", g.memory_used_bytes}, {"memoryTotalBytes", g.memory_total_bytes}});
  }
  o["gpus"] = std::move(gpus);
  if (!u.gpu_note.empty()) o["gpuNote"] = u.gpu_note;
  // The chart's series, oldest first: [time, cpu utilisation or null, memory in use / total or null].
  json::array history;
  for (const NodeUsage& s : samples) {
    json::array point{s.time, nullptr, nullptr};
    if (s.cpu_utilization) point[1] = *s.cpu_utilization;
    if (s.memory_used_bytes >= 0 && s.memory_total_bytes > 0) {
      point[2] = static_cast<double>(s.memory_used_bytes) / static_cast<double>(s.memory_total_bytes);
    }
    history.push_back(std::move(point));
  }
  o["history"] = std::move(history);
  return o;
}

void declare_node_usage_metrics(metrics::Registry& registry) {
  registry.gauge("koi_cluster_node_cpu_utilization_ratio",
                 "Measured busy fraction of a node's CPUs since the previous sample (/proc/stat)", {"node"});
  registry.gauge("koi_cluster_node_load1", "A node's 1-minute load average", {"node"});
  registry.gauge("koi_cluster_node_memory_used_bytes", "A node's memory in use (MemTotal - MemAvailable)", {"node"});
  registry.gauge("koi_cluster_node_memory_total_bytes", "A node's memory (MemTotal)", {"node"});
  registry.gauge("koi_cluster_node_gpu_utilization_ratio", "A GPU's busy fraction as nvidia-smi reports it",
                 {"node", "gpu"});
  registry.gauge("koi_cluster_node_gpu_memory_used_bytes", "A GPU's memory in use (nvidia-smi)", {"node", "gpu"});
  registry.gauge("koi_cluster_node_gpu_memory_total_bytes", "A GPU's memory (nvidia-smi)", {"node", "gpu"});
}

void export_node_usage(metrics::Registry& registry, const std::string& node, const NodeUsage& u) {
  const metrics::Labels labels{{"node", node}};
  if (u.cpu_utilization) registry.set("koi_cluster_node_cpu_utilization_ratio", labels, *u.cpu_utilization);
  if (u.load_average) registry.set("koi_cluster_node_load1", labels, *u.load_average);
  if (u.memory_used_bytes >= 0) registry.set("koi_cluster_node_memory_used_bytes", labels, u.memory_used_bytes);
  if (u.memory_total_bytes >= 0) registry.set("koi_cluster_node_memory_total_bytes", labels, u.memory_total_bytes);
  for (const host::GpuUsage& g : u.gpus) {
    const metrics::Labels gpu{{"node", node}, {"gpu", std::to_string(g.index)}};
    registry.set("koi_cluster_node_gpu_utilization_ratio", gpu, g.utilization);
    registry.set("koi_cluster_node_gpu_memory_used_bytes", gpu, static_cast<double>(g.memory_used_bytes));
    registry.set("koi_cluster_node_gpu_memory_total_bytes", gpu, static_cast<double>(g.memory_total_bytes));
  }
}

}  // namespace koi::cluster
