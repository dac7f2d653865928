#include "gateway/usage_report.h"

#include <fmt/format.h>

#include <ctime>
#include <map>
#include <tuple>

namespace koi::gateway {

std::vector<UsageSummary> summarize_usage(const std::vector<UsageRecord>& records, const std::vector<ModelConfig>& prices) {
  std::map<std::tuple<std::string, std::string, std::string>, UsageSummary> rows;
  for (const UsageRecord& r : records) {
    UsageSummary& s = rows[{r.tenant, r.model, r.version}];
    s.tenant = r.tenant, s.model = r.model, s.version = r.version;
    ++s.requests;
    s.errors += r.status >= 400;
    s.prompt_tokens += r.prompt_tokens;
    s.completion_tokens += r.completion_tokens;
    s.cached_tokens += r.cached_tokens;
  }
  std::vector<UsageSummary> out;
  for (auto& [key, s] : rows) {
    for (const ModelConfig& m : prices) {
      if (m.name != s.model) continue;
      s.cost = static_cast<double>(s.prompt_tokens) * m.prompt_price_per_1k / 1000 +
               static_cast<double>(s.completion_tokens) * m.completion_price_per_1k / 1000;
    }
    out.push_back(s);
  }
  return out;
}

std::string format_usage(const std::vector<UsageSummary>& rows) {
  std::string out = fmt::format("{:<16} {:<16} {:<10} {:>9} {:>7} {:>12} {:>12} {:>10} {:>12}\n", "tenant", "model", "version",
                                "requests", "errors", "prompt_tok", "complet_tok", "cached_tok", "cost");
  UsageSummary total;
  for (const UsageSummary& s : rows) {
    out += fmt::format("{:<16} {:<16} {:<10} {:>9} {:>7} {:>12} {:>12} {:>10} {:>12.6f}\n", s.tenant, s.model, s.version,
                       s.requests, s.errors, s.prompt_tokens, s.completion_tokens, s.cached_tokens, s.cost);
    total.requests += s.requests, total.errors += s.errors, total.prompt_tokens += s.prompt_tokens;
    total.completion_tokens += s.completion_tokens, total.cached_tokens += s.cached_tokens, total.cost += s.cost;
  }
  out += fmt::format("{:<16} {:<16} {:<10} {:>9} {:>7} {:>12} {:>12} {:>10} {:>12.6f}\n", "total", "", "", total.requests,
                     total.errors, total.prompt_tokens, total.completion_tokens, total.cached_tokens, total.cost);
  return out;
}

Result<int64_t> parse_since(std::string_view text, int64_t now_unix_ms) {
  const std::string t(text);
  auto bad = [&] {
    return Status::invalid_argument("--since '" + t + "' is not a date (2026-11-29, 2026-11-29T10:00:00), a duration (90s, 15m, 2h, 7d) or Unix ms");
  };
  if (t.empty()) return bad();
  std::tm tm{};
  for (const char* fmt : {"%Y-%m-%dT%H:%M:%S", "%Y-%m-%d"}) {
    tm = {};
    const char* end = strptime(t.c_str(), fmt, &tm);
    if (end && *end == '\0') return static_cast<int64_t>(timegm(&tm)) * 1000;
  }
  size_t used = 0;
  int64_t n = 0;
  try {
    n = std::stoll(t, &used);
  } catch (const std::exception&) {
    return bad();
  }
  if (n < 0) return bad();
  const std::string unit = t.substr(used);
  if (unit.empty()) return n;
  static const std::map<std::string, int64_t> kUnitMs = {{"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
  auto u = kUnitMs.find(unit);
  if (u == kUnitMs.end()) return bad();
  return now_unix_ms - n * u->second;
}

}  // namespace koi::gateway
