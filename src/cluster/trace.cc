#include "cluster/trace.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>

#include "base/file.h"

namespace koi::cluster {
namespace {

std::vector<std::string_view> split(std::string_view line, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (;;) {
    size_t pos = line.find(sep, start);
    out.push_back(line.substr(start, pos == std::string_view::npos ? pos : pos - start));
    if (pos == std::string_view::npos) return out;
    start = pos + 1;
  }
}

std::vector<std::string_view> lines_of(std::string_view text) {
  std::vector<std::string_view> lines = split(text, '\n');
  for (auto& l : lines) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
  }
  while (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

bool parse_int(std::string_view s, int64_t* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

bool parse_double(std::string_view s, double* out) {
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size() && std::isfinite(*out);
}

// Column lookup by header name.
class Columns {
 public:
  explicit Columns(std::string_view header) : names_(split(header, ',')) {}
  int find(std::string_view name) const {
    for (size_t i = 0; i < names_.size(); ++i) {
      if (names_[i] == name) return static_cast<int>(i);
    }
    return kNone;
  }
  size_t size() const { return names_.size(); }

 private:
  std::vector<std::string_view> names_;
};

void skip(Trace* t, const std::string& reason) {
  ++t->skipped;
  ++t->skipped_by_reason[reason];
}

Result<Trace> parse_alibaba_pods(const std::vector<std::string_view>& lines, const std::string& origin) {
  Columns cols(lines[0]);
  const char* required[] = {"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"};
  for (const char* name : required) {
    if (cols.find(name) == kNone) return Status::invalid_argument(fmt::format("{}: header has no '{}' column", origin, name));
  }
  int c_name = cols.find("name"), c_cpu = cols.find("cpu_milli"), c_mem = cols.find("memory_mib"),
      c_gpu = cols.find("num_gpu"), c_milli = cols.find("gpu_milli"), c_spec = cols.find("gpu_spec"),
      c_qos = cols.find("qos"), c_create = cols.find("creation_time"), c_delete = cols.find("deletion_time"),
      c_sched = cols.find("scheduled_time");
  Trace t;
  t.has_times = c_create != kNone && c_delete != kNone && c_sched != kNone;
  for (size_t row = 1; row < lines.size(); ++row) {
    ++t.rows;
    std::vector<std::string_view> f = split(lines[row], ',');
    if (f.size() != cols.size()) {
      skip(&t, "wrong number of fields");
      continue;
    }
    int64_t cpu, mem, gpus, gpu_milli;
    if (!parse_int(f[c_cpu], &cpu) || !parse_int(f[c_mem], &mem) || !parse_int(f[c_gpu], &gpus) ||
        !parse_int(f[c_milli], &gpu_milli) || cpu < 0 || mem < 0 || gpus < 0 || gpus > kMaxGpusPerNode ||
        gpu_milli < 0 || gpu_milli > kGpuMilli || (gpus > 0 && gpu_milli == 0)) {
      skip(&t, "malformed resource field");
      continue;
    }
    WorkSpec w;
    Job& j = w.job;
    j.name = std::string(f[c_name]);
    j.request = {.cpu_milli = cpu, .memory_mib = mem, .gpus = static_cast<int>(gpus),
                 .gpu_milli = gpus == 1 ? static_cast<int>(gpu_milli) : kGpuMilli};
    std::string qos = c_qos == kNone ? "" : std::string(f[c_qos]);
    w.queue = qos.empty() ? "default" : qos;
    bool guaranteed = qos == "LS" || qos == "Guaranteed";
    j.priority = guaranteed ? 2 : qos == "Burstable" ? 1 : 0;
    j.preemptible = !guaranteed;
    if (c_spec != kNone && !f[c_spec].empty()) {
      for (std::string_view type : split(f[c_spec], '|')) w.gpu_types.emplace_back(type);
    }
    if (t.has_times) {
      double created, deleted, scheduled;
      if (f[c_sched].empty()) {
        skip(&t, "never scheduled (no scheduled_time)");
        continue;
      }
      if (!parse_double(f[c_create], &created) || !parse_double(f[c_delete], &deleted) ||
          !parse_double(f[c_sched], &scheduled)) {
        skip(&t, "malformed time field");
        continue;
      }
      if (deleted < scheduled) {
        skip(&t, "deleted before scheduled");
        continue;
      }
      j.submit_time = created;
      j.duration = deleted - scheduled;
    } else {
      j.submit_time = static_cast<double>(row);
    }
    t.work.push_back(std::move(w));
  }
  return t;
}

Result<Trace> parse_koi_jobs(const std::vector<std::string_view>& lines, const std::string& origin) {
  Columns cols(lines[0]);
  const char* names[] = {"name", "submit_time", "duration", "queue", "priority", "min_replicas", "max_replicas",
                         "gpus", "gpu_milli", "cpu_milli", "memory_mib", "gpu_types", "topology", "preemptible"};
  std::vector<int> c;
  for (const char* name : names) {
    c.push_back(cols.find(name));
    if (c.back() == kNone) return Status::invalid_argument(fmt::format("{}: header has no '{}' column", origin, name));
  }
  Trace t;
  for (size_t row = 1; row < lines.size(); ++row) {
    ++t.rows;
    std::vector<std::string_view> f = split(lines[row], ',');
    auto bad = [&](const char* what) {
      return Status::invalid_argument(fmt::format("{}:{}: {}; see `koi sim --help` for the job CSV format", origin, row + 1, what));
    };
    if (f.size() != cols.size()) return bad("wrong number of fields");
    int64_t prio, min_r, max_r, gpus, gpu_milli, cpu, mem;
    double submit, duration;
    if (!parse_double(f[c[1]], &submit) || !parse_double(f[c[2]], &duration)) return bad("submit_time/duration is not a number");
    if (!parse_int(f[c[4]], &prio) || !parse_int(f[c[5]], &min_r) || !parse_int(f[c[6]], &max_r) ||
        !parse_int(f[c[7]], &gpus) || !parse_int(f[c[8]], &gpu_milli) || !parse_int(f[c[9]], &cpu) ||
        !parse_int(f[c[10]], &mem)) {
      return bad("an integer field is not an integer");
    }
    if (min_r < 1 || max_r < min_r) return bad("need 1 <= min_replicas <= max_replicas");
    if (gpus < 0 || gpus > kMaxGpusPerNode || gpu_milli < 1 || gpu_milli > kGpuMilli || (gpus != 1 && gpu_milli != kGpuMilli)) {
      return bad("gpus must be 0..16 and gpu_milli 1..1000 (below 1000 only with gpus=1)");
    }
    WorkSpec w;
    Job& j = w.job;
    j.name = std::string(f[c[0]]);
    j.submit_time = submit;
    j.duration = duration;
    w.queue = f[c[3]].empty() ? "default" : std::string(f[c[3]]);
    j.priority = static_cast<int>(prio);
    j.min_replicas = static_cast<int>(min_r);
    j.max_replicas = static_cast<int>(max_r);
    j.request = {.cpu_milli = cpu, .memory_mib = mem, .gpus = static_cast<int>(gpus), .gpu_milli = static_cast<int>(gpu_milli)};
    if (!f[c[11]].empty()) {
      for (std::string_view type : split(f[c[11]], '|')) w.gpu_types.emplace_back(type);
    }
    std::string_view topo = f[c[12]];
    if (topo == "none" || topo.empty()) {
      j.topology = Topology::kNone;
    } else if (topo == "nvlinkDomain") {
      j.topology = Topology::kNvlink;
    } else if (topo == "leafSwitch") {
      j.topology = Topology::kLeaf;
    } else if (topo == "spine") {
      j.topology = Topology::kSpine;
    } else {
      return bad("topology must be none, nvlinkDomain, leafSwitch or spine");
    }
    if (f[c[13]] != "true" && f[c[13]] != "false") return bad("preemptible must be true or false");
    j.preemptible = f[c[13]] == "true";
    t.work.push_back(std::move(w));
  }
  return t;
}

}  // namespace

Result<std::vector<NodeSpec>> read_alibaba_nodes(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  std::vector<std::string_view> lines = lines_of(text);
  if (lines.empty()) return Status::invalid_argument(path + ": empty node list");
  Columns cols(lines[0]);
  int c_name = cols.find("sn"), c_cpu = cols.find("cpu_milli"), c_mem = cols.find("memory_mib"),
      c_gpu = cols.find("gpu"), c_model = cols.find("model");
  if (c_name == kNone || c_cpu == kNone || c_mem == kNone || c_gpu == kNone || c_model == kNone) {
    return Status::invalid_argument(path + ": not an Alibaba node list; expected the header sn,cpu_milli,memory_mib,gpu,model");
  }
  std::vector<NodeSpec> nodes;
  for (size_t row = 1; row < lines.size(); ++row) {
    std::vector<std::string_view> f = split(lines[row], ',');
    int64_t cpu, mem, gpus;
    if (f.size() != cols.size() || !parse_int(f[c_cpu], &cpu) || !parse_int(f[c_mem], &mem) ||
        !parse_int(f[c_gpu], &gpus) || gpus < 0 || gpus > kMaxGpusPerNode) {
      return Status::invalid_argument(fmt::format("{}:{}: malformed node row", path, row + 1));
    }
    NodeSpec n;
    n.name = std::string(f[c_name]);
    n.cpu_milli = cpu;
    n.memory_mib = mem;
    n.gpu_count = static_cast<int>(gpus);
    n.gpu_type = gpus > 0 ? std::string(f[c_model]) : "";
    nodes.push_back(std::move(n));
  }
  return nodes;
}

Result<Trace> parse_trace(const std::string& text, const std::string& origin) {
  std::vector<std::string_view> lines = lines_of(text);
  if (lines.empty()) return Status::invalid_argument(origin + ": empty trace");
  Columns cols(lines[0]);
  if (cols.find("submit_time") != kNone) return parse_koi_jobs(lines, origin);
  if (cols.find("num_gpu") != kNone) return parse_alibaba_pods(lines, origin);
  return Status::invalid_argument(origin + ": unknown trace format; expected an Alibaba pod list (name,cpu_milli,memory_mib,"
                                           "num_gpu,gpu_milli,...) or a Koi job CSV (name,submit_time,duration,...)");
}

Result<Trace> read_trace(const std::string& path) {
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return parse_trace(text, path);
}

}  // namespace koi::cluster
