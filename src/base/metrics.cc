#include "base/metrics.h"

#include <algorithm>

#include <fmt/format.h>

#include "base/check.h"

namespace koi::metrics {
namespace {

std::string series_name(const std::string& name, const std::string& labels) {
  return labels.empty() ? name : name + "{" + labels + "}";
}

std::string format_value(double v) { return fmt::format("{}", v); }

const char* type_name(Type t) {
  switch (t) {
    case Type::kCounter: return "counter";
    case Type::kGauge: return "gauge";
    case Type::kHistogram: return "histogram";
  }
  return "untyped";
}

// Pairs a family's label names with the values of one series.
Labels zip_labels(const internal::FamilyData& f, const std::vector<std::string>& values) {
  KOI_CHECK(values.size() == f.label_names.size());
  Labels labels;
  for (size_t i = 0; i < values.size(); ++i) labels.emplace_back(f.label_names[i], values[i]);
  return labels;
}

// The declared family `name`, whose label names must be those of `labels`, in order.
// `Families` is the registry's deque, const or not. Caller holds the registry's mutex.
template <typename Families>
auto& checked_family(Families& families, const std::string& name, const Labels& labels) {
  auto it = std::find_if(families.begin(), families.end(),
                         [&](const internal::FamilyData& f) { return f.name == name; });
  KOI_CHECK(it != families.end());
  KOI_CHECK(labels.size() == it->label_names.size());
  for (size_t i = 0; i < labels.size(); ++i) KOI_CHECK(labels[i].first == it->label_names[i]);
  return *it;
}

}  // namespace

std::string escape_label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    if (c == '\\' || c == '"') out += '\\';
    out += c;
  }
  return out;
}

std::string render_labels(const Labels& labels) {
  std::string out;
  for (const auto& [k, v] : labels) {
    if (!out.empty()) out += ',';
    out += k + "=\"" + escape_label_value(v) + "\"";
  }
  return out;
}

Histogram::Histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1) {
  KOI_CHECK(std::is_sorted(bounds_.begin(), bounds_.end()));
}

void Histogram::observe(double v) {
  const size_t bucket = static_cast<size_t>(std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin());
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  double old = sum_.load(std::memory_order_relaxed);
  while (!sum_.compare_exchange_weak(old, old + v, std::memory_order_relaxed)) {
  }
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (const auto& c : counts_) n += c.load(std::memory_order_relaxed);
  return n;
}

void Histogram::render(const std::string& name, const std::string& labels, std::string* out) const {
  // _count is the +Inf bucket as read here, so a scrape racing observe() stays consistent.
  const std::string sep = labels.empty() ? "" : labels + ",";
  uint64_t cumulative = 0;
  for (size_t i = 0; i <= bounds_.size(); ++i) {
    cumulative += counts_[i].load(std::memory_order_relaxed);
    const std::string le = i < bounds_.size() ? format_value(bounds_[i]) : "+Inf";
    *out += fmt::format("{}_bucket{{{}le=\"{}\"}} {}\n", name, sep, le, cumulative);
  }
  *out += fmt::format("{} {}\n", series_name(name + "_sum", labels), format_value(sum()));
  *out += fmt::format("{} {}\n", series_name(name + "_count", labels), cumulative);
}

template <>
Scalar& Family<Scalar>::labels(const std::vector<std::string>& values) const {
  const std::string rendered = render_labels(zip_labels(*data_, values));
  std::lock_guard lock(registry_->mu_);
  return registry_->scalar(*data_, rendered);
}

template <>
Histogram& Family<Histogram>::labels(const std::vector<std::string>& values) const {
  const std::string rendered = render_labels(zip_labels(*data_, values));
  std::lock_guard lock(registry_->mu_);
  return registry_->histogram_series(*data_, rendered);
}

internal::FamilyData* Registry::declare(const std::string& name, const std::string& help, Type type,
                                        const std::vector<std::string>& label_names,
                                        const std::vector<double>& bounds) {
  std::lock_guard lock(mu_);
  for (internal::FamilyData& f : families_) {
    if (f.name != name) continue;
    KOI_CHECK(f.type == type && f.label_names == label_names && f.bounds == bounds);
    return &f;
  }
  families_.push_back({name, help, type, label_names, bounds, {}, {}});
  return &families_.back();
}

Family<Counter> Registry::counter(const std::string& name, const std::string& help,
                                  const std::vector<std::string>& label_names) {
  return {this, declare(name, help, Type::kCounter, label_names, {})};
}

Family<Gauge> Registry::gauge(const std::string& name, const std::string& help,
                              const std::vector<std::string>& label_names) {
  return {this, declare(name, help, Type::kGauge, label_names, {})};
}

Family<Histogram> Registry::histogram(const std::string& name, const std::string& help,
                                      const std::vector<std::string>& label_names,
                                      const std::vector<double>& bounds) {
  return {this, declare(name, help, Type::kHistogram, label_names, bounds)};
}

// Caller holds mu_.
Scalar& Registry::scalar(internal::FamilyData& f, const std::string& rendered) {
  KOI_CHECK(f.type != Type::kHistogram);
  auto& slot = f.scalars[rendered];
  if (!slot) slot = std::make_unique<Scalar>();
  return *slot;
}

// Caller holds mu_.
Histogram& Registry::histogram_series(internal::FamilyData& f, const std::string& rendered) {
  KOI_CHECK(f.type == Type::kHistogram);
  auto& slot = f.histograms[rendered];
  if (!slot) slot = std::make_unique<Histogram>(f.bounds);
  return *slot;
}

// The label string is built before the lock is taken: the by-name calls are on request paths.
void Registry::add(const std::string& name, const Labels& labels, double delta) {
  const std::string rendered = render_labels(labels);
  std::lock_guard lock(mu_);
  scalar(checked_family(families_, name, labels), rendered).inc(delta);
}

void Registry::set(const std::string& name, const Labels& labels, double value) {
  const std::string rendered = render_labels(labels);
  std::lock_guard lock(mu_);
  scalar(checked_family(families_, name, labels), rendered).set(value);
}

void Registry::observe(const std::string& name, const Labels& labels, double value) {
  const std::string rendered = render_labels(labels);
  std::lock_guard lock(mu_);
  histogram_series(checked_family(families_, name, labels), rendered).observe(value);
}

double Registry::value(const std::string& name, const Labels& labels) const {
  std::lock_guard lock(mu_);
  const internal::FamilyData& f = checked_family(families_, name, labels);
  const std::string rendered = render_labels(labels);
  if (f.type == Type::kHistogram) {
    auto h = f.histograms.find(rendered);
    return h == f.histograms.end() ? 0.0 : static_cast<double>(h->second->count());
  }
  auto s = f.scalars.find(rendered);
  return s == f.scalars.end() ? 0.0 : s->second->value();
}

std::string Registry::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  for (const internal::FamilyData& f : families_) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", f.name, f.help, f.name, type_name(f.type));
    const bool add_total = f.type == Type::kCounter && !f.name.ends_with("_total");
    const std::string sample = add_total ? f.name + "_total" : f.name;
    for (const auto& [labels, s] : f.scalars) out += fmt::format("{} {}\n", series_name(sample, labels), format_value(s->value()));
    for (const auto& [labels, h] : f.histograms) h->render(f.name, labels, &out);
  }
  return out;
}

}  // namespace koi::metrics
