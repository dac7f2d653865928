// The one metrics registry: counters, gauges and histograms with labels, rendered in the
// Prometheus text exposition format (version 0.0.4). serve, gateway and train all export
// through it.
//
// A family is declared once with its name, help, label names (and bucket bounds for a
// histogram); a series is one set of label values of a family. Series are created on first
// use and never removed, so the references handed out stay valid for the registry's life:
// hot paths look a series up once and then update it with relaxed atomics (Scalar: one
// atomic double; Histogram: one atomic count per bucket and an atomic sum), taking no lock.
// Looking a series up (Family::labels, the by-name calls) and render() take the registry's
// mutex. Every method is safe to call from any thread.
//
// Declaring a family again with the same type, label names and bounds returns the same
// family; declaring it with different ones, updating an undeclared family or passing the
// wrong number of label values is a programmer error (KOI_CHECK).
//
// Rendering: families in declaration order, each with its # HELP and # TYPE lines, then its
// series ordered by their rendered labels. A counter's samples are named NAME_total, as
// Prometheus clients name them, unless NAME already ends in _total. Histogram buckets are
// cumulative and end in le="+Inf", followed by NAME_sum and NAME_count.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace koi::metrics {

enum class Type { kCounter, kGauge, kHistogram };

// Label name/value pairs, for the by-name calls: {{"tenant", "acme"}, {"status", "200"}}.
using Labels = std::vector<std::pair<std::string, std::string>>;

// The value of a counter or gauge series.
class Scalar {
 public:
  void inc(double delta = 1.0) {
    double old = value_.load(std::memory_order_relaxed);
    while (!value_.compare_exchange_weak(old, old + delta, std::memory_order_relaxed)) {
    }
  }
  // Gauges; and counters that mirror a cumulative count kept elsewhere (the engine's
  // statistics), which must never go down.
  void set(double v) { value_.store(v, std::memory_order_relaxed); }
  double value() const { return value_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> value_{0.0};
};
using Counter = Scalar;
using Gauge = Scalar;

// One histogram series. `bounds` are the buckets' upper bounds, ascending; +Inf is implied.
// An observation v lands in the first bucket with v <= bound.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  uint64_t count() const;
  double sum() const { return sum_.load(std::memory_order_relaxed); }
  // Appends the _bucket, _sum and _count lines; `labels` is the rendered label set.
  void render(const std::string& name, const std::string& labels, std::string* out) const;

 private:
  const std::vector<double> bounds_;
  std::vector<std::atomic<uint64_t>> counts_;  // per bucket, not cumulative; last is +Inf
  std::atomic<double> sum_{0.0};
};

namespace internal {
struct FamilyData {
  std::string name, help;
  Type type;
  std::vector<std::string> label_names;
  std::vector<double> bounds;  // histograms only
  std::map<std::string, std::unique_ptr<Scalar>> scalars;        // by rendered labels
  std::map<std::string, std::unique_ptr<Histogram>> histograms;  // by rendered labels
};
}  // namespace internal

class Registry;

// A handle to a declared family (two pointers; copy it freely). Series is Scalar or Histogram.
template <typename Series>
class Family {
 public:
  // The series with these label values, one per label name in declaration order.
  Series& labels(const std::vector<std::string>& values) const;
  const std::string& name() const { return data_->name; }

 private:
  friend class Registry;
  Family(Registry* registry, internal::FamilyData* data) : registry_(registry), data_(data) {}
  Registry* registry_;
  internal::FamilyData* data_;
};

template <>
Scalar& Family<Scalar>::labels(const std::vector<std::string>& values) const;
template <>
Histogram& Family<Histogram>::labels(const std::vector<std::string>& values) const;

class Registry {
 public:
  Registry() = default;
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  Family<Counter> counter(const std::string& name, const std::string& help,
                          const std::vector<std::string>& label_names = {});
  Family<Gauge> gauge(const std::string& name, const std::string& help,
                      const std::vector<std::string>& label_names = {});
  Family<Histogram> histogram(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names, const std::vector<double>& bounds);

  // By name, for labels known only at request time. The label names must be the family's,
  // in its order.
  void add(const std::string& name, const Labels& labels, double delta = 1.0);  // counter or gauge
  void set(const std::string& name, const Labels& labels, double value);        // counter or gauge
  void observe(const std::string& name, const Labels& labels, double value);    // histogram
  // A counter's or gauge's value, or a histogram's count; 0 if the series does not exist
  // (it is not created). For tests and admin APIs.
  double value(const std::string& name, const Labels& labels) const;

  std::string render() const;

 private:
  template <typename Series>
  friend class Family;
  internal::FamilyData* declare(const std::string& name, const std::string& help, Type type,
                                const std::vector<std::string>& label_names, const std::vector<double>& bounds);
  Scalar& scalar(internal::FamilyData& f, const std::string& rendered);
  Histogram& histogram_series(internal::FamilyData& f, const std::string& rendered);

  mutable std::mutex mu_;
  std::deque<internal::FamilyData> families_;  // in declaration order; stable addresses
};

// The label set in exposition syntax, without braces: a="x",b="y\"z".
std::string render_labels(const Labels& labels);
// "a\"b" -> a\\\"b: a label value escaped for the exposition format (\\, \" and \n).
std::string escape_label_value(const std::string& v);

}  // namespace koi::metrics
