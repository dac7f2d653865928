#include "base/host_usage.h"

#include <charconv>
#include <fstream>
#include <sstream>

#include <fmt/format.h>

namespace koi::host {
namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

template <typename T>
std::optional<T> number(std::string_view s) {
  s = trim(s);
  T v{};
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// The line of `text` that starts with `prefix` (at the start of a line), without the prefix.
std::optional<std::string_view> line_after(std::string_view text, std::string_view prefix) {
  for (size_t at = 0; at < text.size();) {
    size_t end = text.find('\n', at);
    if (end == std::string_view::npos) end = text.size();
    const std::string_view line = text.substr(at, end - at);
    if (line.starts_with(prefix)) return line.substr(prefix.size());
    at = end + 1;
  }
  return std::nullopt;
}

std::string slurp(const char* path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace

std::optional<CpuTimes> parse_proc_stat(std::string_view text) {
  const std::optional<std::string_view> line = line_after(text, "cpu ");
  if (!line) return std::nullopt;
  // user nice system idle iowait irq softirq steal [guest guest_nice: already in user, nice]
  uint64_t fields[8] = {};
  std::string_view rest = *line;
  int n = 0;
  for (; n < 8; ++n) {
    rest = trim(rest);
    const size_t space = rest.find(' ');
    const std::optional<uint64_t> v = number<uint64_t>(rest.substr(0, space));
    if (!v) break;
    fields[n] = *v;
    if (space == std::string_view::npos) {
      ++n;
      break;
    }
    rest.remove_prefix(space);
  }
  if (n < 4) return std::nullopt;  // kernels before 2.6 had four fields; fewer is not /proc/stat
  const uint64_t idle = fields[3] + fields[4];
  CpuTimes t;
  t.busy = fields[0] + fields[1] + fields[2] + fields[5] + fields[6] + fields[7];
  t.total = t.busy + idle;
  return t;
}

std::optional<double> cpu_utilization(const CpuTimes& before, const CpuTimes& after) {
  if (after.total <= before.total || after.busy < before.busy) return std::nullopt;
  const double busy = static_cast<double>(after.busy - before.busy);
  return std::min(1.0, busy / static_cast<double>(after.total - before.total));
}

int64_t meminfo_bytes(std::string_view meminfo, std::string_view key) {
  const std::optional<std::string_view> line = line_after(meminfo, std::string(key) + ":");
  if (!line) return -1;
  std::string_view rest = trim(*line);
  if (!rest.ends_with(" kB")) return -1;
  const std::optional<int64_t> kib = number<int64_t>(rest.substr(0, rest.size() - 3));
  return kib ? *kib * 1024 : -1;
}

std::optional<double> parse_loadavg(std::string_view text) {
  return number<double>(text.substr(0, text.find(' ')));
}

Result<std::vector<GpuUsage>> parse_nvidia_smi(std::string_view csv) {
  std::vector<GpuUsage> out;
  constexpr int kFields = 5;
  const char* names[kFields] = {"index", "name", "utilization.gpu", "memory.used", "memory.total"};
  for (size_t at = 0; at < csv.size();) {
    size_t end = csv.find('\n', at);
    if (end == std::string_view::npos) end = csv.size();
    const std::string_view line = trim(csv.substr(at, end - at));
    at = end + 1;
    if (line.empty()) continue;
    std::string_view f[kFields];
    std::string_view rest = line;
    for (int i = 0; i < kFields; ++i) {
      const size_t comma = i + 1 < kFields ? rest.find(',') : std::string_view::npos;
      if (i + 1 < kFields && comma == std::string_view::npos) {
        return Status::invalid_argument(
            fmt::format("nvidia-smi line '{}' has fewer than {} fields ({})", line, kFields, kNvidiaSmiQuery));
      }
      f[i] = trim(rest.substr(0, comma));
      if (comma != std::string_view::npos) rest.remove_prefix(comma + 1);
    }
    GpuUsage g;
    g.name = std::string(f[1]);
    const std::optional<int> index = number<int>(f[0]);
    const std::optional<double> util = number<double>(f[2]);
    const std::optional<int64_t> used = number<int64_t>(f[3]), total = number<int64_t>(f[4]);
    const bool ok[kFields] = {index.has_value(), true, util.has_value(), used.has_value(), total.has_value()};
    for (int i = 0; i < kFields; ++i) {
      if (!ok[i]) {
        return Status::unavailable(fmt::format("nvidia-smi reports {} '{}' for GPU {} (line '{}'): not a number",
                                               names[i], f[i], f[0], line));
      }
    }
    g.index = *index;
    g.utilization = *util / 100.0;
    g.memory_used_bytes = *used << 20;
    g.memory_total_bytes = *total << 20;
    out.push_back(std::move(g));
  }
  return out;
}

std::optional<CpuTimes> read_cpu_times() { return parse_proc_stat(slurp("/proc/stat")); }

int64_t read_meminfo_bytes(std::string_view key) { return meminfo_bytes(slurp("/proc/meminfo"), key); }

std::optional<double> read_load_average() { return parse_loadavg(slurp("/proc/loadavg")); }

}  // namespace koi::host
