// The usage report of `koi gateway usage`: ledger records summed per tenant, model and
// version, priced from the models' price table (currency units per 1000 prompt and
// completion tokens). parse_since() reads the --since flag: an ISO date or date-time (UTC,
// "2026-11-29" or "2026-11-29T10:00:00"), a duration back from now ("90s", "15m", "2h",
// "7d"), or Unix milliseconds. Pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "gateway/config.h"
#include "gateway/usage_store.h"

namespace koi::gateway {

struct UsageSummary {
  std::string tenant, model, version;
  int64_t requests = 0, errors = 0;  // errors: status >= 400
  int64_t prompt_tokens = 0, completion_tokens = 0, cached_tokens = 0;
  double cost = 0;
};

std::vector<UsageSummary> summarize_usage(const std::vector<UsageRecord>& records, const std::vector<ModelConfig>& prices);
std::string format_usage(const std::vector<UsageSummary>& rows);
Result<int64_t> parse_since(std::string_view text, int64_t now_unix_ms);

}  // namespace koi::gateway
