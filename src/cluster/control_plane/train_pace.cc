#include "cluster/control_plane/train_pace.h"

#include <fmt/format.h>

#include <algorithm>
#include <boost/json.hpp>
#include <fstream>
#include <sstream>

namespace koi::cluster {

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

std::vector<StepPace> parse_pace(const std::string& jsonl) {
  std::vector<StepPace> out;
  std::istringstream in(jsonl);
  std::string line;
  while (std::getline(in, line)) {
    boost::system::error_code ec;
    const boost::json::value v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) continue;
    const boost::json::object& o = v.as_object();
    const auto* step = o.if_contains("step");
    const auto* ms = o.if_contains("step_ms");
    if (!step || !ms || !step->is_int64() || !(ms->is_double() || ms->is_int64())) continue;
    StepPace p;
    p.step = step->as_int64();
    p.step_ms = ms->to_number<double>();
    if (const auto* ranks = o.if_contains("rank_ms"); ranks && ranks->is_array()) {
      for (const auto& r : ranks->as_array()) {
        if (r.is_double() || r.is_int64()) p.rank_ms.push_back(r.to_number<double>());
      }
    }
    out.push_back(std::move(p));
  }
  return out;
}

std::optional<Straggler> find_straggler(const std::vector<StepPace>& steps) {
  if (static_cast<int>(steps.size()) < kPaceWindow) return std::nullopt;
  const auto window = std::vector<StepPace>(steps.end() - kPaceWindow, steps.end());
  const size_t ranks = window.back().rank_ms.size();
  if (ranks < 2) return std::nullopt;
  for (size_t rank = 0; rank < ranks; ++rank) {
    bool slow_throughout = true;
    std::vector<double> mine, medians;
    for (const StepPace& s : window) {
      if (s.rank_ms.size() != ranks) return std::nullopt;
      const double m = median(s.rank_ms);
      slow_throughout = slow_throughout && s.rank_ms[rank] > kStragglerRatio * m;
      mine.push_back(s.rank_ms[rank]);
      medians.push_back(m);
    }
    if (!slow_throughout) continue;
    return Straggler{static_cast<int>(rank), median(mine), median(medians), window.front().step, window.back().step};
  }
  return std::nullopt;
}

bool ranks_even(const std::vector<StepPace>& steps) {
  if (static_cast<int>(steps.size()) < kPaceWindow) return false;
  for (auto s = steps.end() - kPaceWindow; s != steps.end(); ++s) {
    if (s->rank_ms.size() < 2) return false;
    const double m = median(s->rank_ms);
    for (double ms : s->rank_ms) {
      if (ms > kStragglerRatio * m) return false;
    }
  }
  return true;
}

std::optional<Slowdown> find_slowdown(const std::vector<StepPace>& steps) {
  const int n = static_cast<int>(steps.size());
  if (n < kPaceWindow + kPaceHistory) return std::nullopt;
  std::vector<double> recent, usual;
  for (int i = 0; i < n; ++i) (i < n - kPaceWindow ? usual : recent).push_back(steps[i].step_ms);
  const double recent_ms = median(recent), usual_ms = median(usual);
  if (usual_ms <= 0 || recent_ms <= kSlowRatio * usual_ms || recent_ms - usual_ms < kSlowMinExtraMs) return std::nullopt;
  return Slowdown{recent_ms, usual_ms, steps[n - kPaceWindow].step, steps.back().step, n - kPaceWindow};
}

std::optional<double> recovered_pace(const std::vector<StepPace>& steps, double usual_ms) {
  if (static_cast<int>(steps.size()) < kPaceWindow || usual_ms <= 0) return std::nullopt;
  std::vector<double> recent;
  for (auto s = steps.end() - kPaceWindow; s != steps.end(); ++s) recent.push_back(s->step_ms);
  const double recent_ms = median(recent);
  if (recent_ms > kRecoveredRatio * usual_ms && recent_ms - usual_ms > kSlowMinExtraMs / 2) return std::nullopt;
  return recent_ms;
}

std::string Straggler::message() const {
  return fmt::format("rank {} is a straggler: {:.1f} ms of compute per step over steps {}-{}, {:.1f}x the median "
                     "of the ranks ({:.1f} ms)",
                     rank, rank_ms, first_step, last_step, median_ms > 0 ? rank_ms / median_ms : 0.0, median_ms);
}

std::string Slowdown::message() const {
  return fmt::format("steps {}-{} took {:.1f} ms each (median), {:.1f}x the job's own {:.1f} ms over the {} steps "
                     "before: something slowed it (a stopped or starved process, a busy node)",
                     first_step, last_step, recent_ms, usual_ms > 0 ? recent_ms / usual_ms : 0.0, usual_ms, history);
}

const std::vector<StepPace>& PaceFollower::update(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *this = PaceFollower();
    return steps_;
  }
  f.seekg(0, std::ios::end);
  const int64_t size = f.tellg();
  if (size < offset_) *this = PaceFollower();  // a new file
  if (offset_ == 0) offset_ = std::max<int64_t>(0, size - kPaceTailBytes);  // a partial first line is skipped
  if (size == offset_) return steps_;
  std::string text(static_cast<size_t>(size - offset_), '\0');
  f.seekg(offset_);
  f.read(text.data(), static_cast<std::streamsize>(text.size()));
  text.resize(static_cast<size_t>(f.gcount()));
  offset_ += static_cast<int64_t>(text.size());
  text.insert(0, partial_);
  const size_t end = text.rfind('\n');
  partial_ = end == std::string::npos ? text : text.substr(end + 1);
  if (end == std::string::npos) return steps_;
  text.resize(end + 1);
  for (StepPace& p : parse_pace(text)) steps_.push_back(std::move(p));
  if (steps_.size() > kPaceKeepSteps) steps_.erase(steps_.begin(), steps_.end() - kPaceKeepSteps);
  return steps_;
}

}  // namespace koi::cluster
