#include "gateway/metrics.h"

#include <fmt/format.h>

namespace koi::gateway {

namespace {

constexpr double kBuckets[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60};
constexpr size_t kNumBuckets = sizeof kBuckets / sizeof kBuckets[0];

std::string render_labels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    out += out.empty() ? "" : ",";
    out += k + "=\"";
    for (char c : v) {
      if (c == '"' || c == '\\') out += '\\';
      out += c == '\n' ? 'n' : c;
    }
    out += '"';
  }
  return out;
}

std::string braces(const std::string& labels, const std::string& extra = "") {
  std::string all = labels.empty() ? extra : (extra.empty() ? labels : labels + "," + extra);
  return all.empty() ? "" : "{" + all + "}";
}

}  // namespace

void Metrics::declare(const std::string& name, Type type, const std::string& help) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[name].type = type;
  families_[name].help = help;
}

void Metrics::add(const std::string& name, const Labels& labels, double delta) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[name].values[render_labels(labels)] += delta;
}

void Metrics::set(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  families_[name].values[render_labels(labels)] = value;
}

void Metrics::observe(const std::string& name, const Labels& labels, double value) {
  std::lock_guard<std::mutex> lock(mu_);
  Histogram& h = families_[name].histograms[render_labels(labels)];
  if (h.counts.empty()) h.counts.assign(kNumBuckets, 0);
  size_t b = 0;
  while (b < kNumBuckets && value > kBuckets[b]) ++b;
  if (b < kNumBuckets) ++h.counts[b];
  h.sum += value;
  ++h.count;
}

double Metrics::value(const std::string& name, const Labels& labels) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto f = families_.find(name);
  if (f == families_.end()) return 0;
  auto v = f->second.values.find(render_labels(labels));
  return v == f->second.values.end() ? 0 : v->second;
}

std::string Metrics::render() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string out;
  for (const auto& [name, f] : families_) {
    static constexpr const char* kTypeNames[] = {"counter", "gauge", "histogram"};
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, f.help, name, kTypeNames[static_cast<int>(f.type)]);
    for (const auto& [labels, v] : f.values) out += fmt::format("{}{} {}\n", name, braces(labels), v);
    for (const auto& [labels, h] : f.histograms) {
      uint64_t cumulative = 0;
      for (size_t b = 0; b < kNumBuckets; ++b) {
        cumulative += h.counts[b];
        out += fmt::format("{}_bucket{} {}\n", name, braces(labels, fmt::format("le=\"{}\"", kBuckets[b])), cumulative);
      }
      out += fmt::format("{}_bucket{} {}\n", name, braces(labels, "le=\"+Inf\""), h.count);
      out += fmt::format("{}_sum{} {}\n{}_count{} {}\n", name, braces(labels), h.sum, name, braces(labels), h.count);
    }
  }
  return out;
}

}  // namespace koi::gateway
