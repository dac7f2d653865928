// Metrics: counters, gauges and histograms keyed by name and labels, rendered in the
// Prometheus text format. Names are declared once with their type and help; series appear on
// first use. Thread-safe (one mutex; the gateway touches it a few times per request).
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace koi::gateway {

using Labels = std::vector<std::pair<std::string, std::string>>;

class Metrics {
 public:
  enum class Type { kCounter, kGauge, kHistogram };
  void declare(const std::string& name, Type type, const std::string& help);
  void add(const std::string& name, const Labels& labels, double delta = 1);
  void set(const std::string& name, const Labels& labels, double value);
  void observe(const std::string& name, const Labels& labels, double value);
  std::string render() const;
  // The value of one counter or gauge series (0 if absent); for tests and the admin API.
  double value(const std::string& name, const Labels& labels) const;

 private:
  struct Histogram {
    std::vector<uint64_t> counts;  // per bucket, not cumulative
    double sum = 0;
    uint64_t count = 0;
  };
  struct Family {
    Type type = Type::kCounter;
    std::string help;
    std::map<std::string, double> values;        // by rendered labels
    std::map<std::string, Histogram> histograms;  // by rendered labels
  };
  mutable std::mutex mu_;
  std::map<std::string, Family> families_;
};

}  // namespace koi::gateway
