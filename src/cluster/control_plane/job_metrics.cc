#include "cluster/control_plane/job_metrics.h"

#include <boost/json.hpp>
#include <charconv>
#include <filesystem>
#include <functional>
#include <map>

#include "base/file.h"
#include "cluster/control_plane/reconciler.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr int64_t kLogTailBytes = 1 << 20;

std::optional<double> number_of(std::string_view s) {
  double x = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), x);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return x;
}

bool name_like(std::string_view s) {
  if (s.empty() || !std::isalpha(static_cast<unsigned char>(s[0]))) return false;
  for (char c : s) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

// "loss 1.8" -> {loss, 1.8}; "windows 79 of 128 (stride 64)" -> {windows, 79}.
std::optional<std::pair<std::string, double>> segment(std::string_view seg) {
  while (!seg.empty() && seg.front() == ' ') seg.remove_prefix(1);
  const size_t sp = seg.find(' ');
  if (sp == std::string_view::npos) return std::nullopt;
  const std::string_view name = seg.substr(0, sp);
  std::string_view value = seg.substr(sp + 1);
  value = value.substr(0, value.find(' '));
  auto x = number_of(value);
  if (!name_like(name) || !x) return std::nullopt;
  return std::pair<std::string, double>(std::string(name), *x);
}

// A line every one of whose segments is "NAME NUMBER ...".
std::optional<json::object> result_line(std::string_view line) {
  json::object out;
  while (!line.empty()) {
    const size_t bar = line.find(" | ");
    auto kv = segment(line.substr(0, bar));
    if (!kv) return std::nullopt;
    out[kv->first] = kv->second;
    if (bar == std::string_view::npos) break;
    line.remove_prefix(bar + 3);
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// Calls fn(object) for each line of `text` that is a JSON object; others (a torn last line
// after a crash, or while the trainer writes it) are skipped.
void for_each_object_line(std::string_view text, const std::function<void(const json::object&)>& fn) {
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    json::error_code ec;
    json::value v = json::parse(line, ec);
    if (!ec && v.is_object()) fn(v.as_object());
  }
}

// Keeps every k-th of `points` (k a power of two, the smallest giving at most `max_points`)
// and the last.
json::array thinned(const std::map<int64_t, double>& points, size_t max_points) {
  size_t stride = 1;
  while (max_points > 1 && (points.size() + stride - 1) / stride > max_points - 1) stride *= 2;
  json::array out;
  size_t i = 0;
  for (const auto& [step, value] : points) {
    if (i % stride == 0 || i + 1 == points.size()) out.push_back(json::array{step, value});
    ++i;
  }
  return out;
}

std::string run_metrics_path(const JobObject& job, const std::string& work_dir) {
  return path_join(job_checkpoint_dir(work_dir, job), "metrics.jsonl");
}

bool trains(const JobObject& job) { return job.spec.kind == JobKind::kTrain || job.spec.kind == JobKind::kFinetune; }

}  // namespace

json::object metric_series_from_jsonl(std::string_view text, size_t max_points) {
  std::map<std::string, std::map<int64_t, double>> fields;  // name -> step -> value
  for_each_object_line(text, [&](const json::object& line) {
    const json::value* step = line.if_contains("step");
    json::error_code ec;
    const int64_t at = step && step->is_number() ? step->to_number<int64_t>(ec) : 0;
    if (!step || !step->is_number() || ec) return;
    for (const auto& [k, x] : line) {
      if (x.is_number() && k != "step") fields[k][at] = x.to_number<double>();  // a later line wins
    }
  });
  json::object out;
  for (const auto& [name, points] : fields) out[name] = thinned(points, max_points);
  return out;
}

json::object metrics_from_jsonl(std::string_view text) {
  json::object out;
  for_each_object_line(text, [&](const json::object& line) {
    for (const auto& [k, x] : line) {
      if (x.is_number()) out[k] = x;
    }
  });
  return out;
}

json::object metrics_from_log(std::string_view log) {
  std::optional<json::object> last;
  while (!log.empty()) {
    const size_t nl = log.find('\n');
    std::string_view line = log.substr(0, nl);
    log.remove_prefix(nl == std::string_view::npos ? log.size() : nl + 1);
    while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.remove_suffix(1);
    if (auto m = result_line(line)) last = std::move(m);
  }
  return last.value_or(json::object{});
}

int64_t checkpoint_step(const std::string& dir) {
  const std::string name = std::filesystem::path(dir).filename().string();
  if (!name.starts_with("ckpt-") || name.size() == 5) return -1;
  int64_t step = 0;
  auto [end, ec] = std::from_chars(name.data() + 5, name.data() + name.size(), step);
  return ec == std::errc() && end == name.data() + name.size() ? step : -1;
}

std::string newest_checkpoint(const std::string& run_dir) {
  std::error_code ec;
  std::string best;
  int64_t best_step = -1;
  for (const auto& entry : std::filesystem::directory_iterator(run_dir, ec)) {
    const std::string path = entry.path().string();
    const int64_t step = checkpoint_step(path);
    if (step > best_step && file_exists(path_join(path, "COMPLETE"))) best = path, best_step = step;
  }
  return best;
}

Result<json::object> job_metrics(const JobObject& job, const std::string& work_dir, const Executor& executor) {
  if (trains(job)) {
    const std::string path = run_metrics_path(job, work_dir);
    if (!file_exists(path)) return json::object{};
    KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
    return metrics_from_jsonl(text);
  }
  if (job.status.attempts == 0) return json::object{};
  const std::string dir = replica_dir(work_dir, job.metadata.ns, job.metadata.name, job.status.attempts, 0);
  // The result line is at the end: the last MiB is enough (a negative offset counts from the end).
  KOI_ASSIGN_OR_RETURN(std::string log, executor.logs(ReplicaHandle{"", dir}, -kLogTailBytes, kLogTailBytes));
  return metrics_from_log(log);
}

Result<json::object> job_metric_series(const JobObject& job, const std::string& work_dir, size_t max_points) {
  const std::string path = run_metrics_path(job, work_dir);
  if (!trains(job) || !file_exists(path)) return json::object{};
  KOI_ASSIGN_OR_RETURN(std::string text, read_file(path));
  return metric_series_from_jsonl(text, max_points);
}

}  // namespace koi::cluster
