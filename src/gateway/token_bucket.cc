#include "gateway/token_bucket.h"

#include <algorithm>
#include <cmath>

namespace koi::gateway {

namespace {
constexpr double kNsPerMinute = 60e9;
}

TokenBucket::TokenBucket(double rate_per_minute, double burst, int64_t now_ns)
    : rate_per_minute_(rate_per_minute), burst_(burst), level_(burst), last_ns_(now_ns) {}

void TokenBucket::refill(int64_t now_ns) {
  if (now_ns > last_ns_) {
    level_ = std::min(burst_, level_ + static_cast<double>(now_ns - last_ns_) * rate_per_minute_ / kNsPerMinute);
    last_ns_ = now_ns;
  }
}

int64_t TokenBucket::try_take(double n, int64_t now_ns) {
  refill(now_ns);
  const double needed = std::min(n, burst_);
  if (level_ >= needed) {
    level_ -= n;
    return 0;
  }
  if (rate_per_minute_ <= 0) return INT64_MAX;
  return static_cast<int64_t>(std::ceil((needed - level_) * kNsPerMinute / rate_per_minute_));
}

void TokenBucket::adjust(double delta, int64_t now_ns) {
  refill(now_ns);
  level_ = std::min(burst_, level_ - delta);
}

void TokenBucket::reconfigure(double rate_per_minute, double burst, int64_t now_ns) {
  refill(now_ns);
  rate_per_minute_ = rate_per_minute;
  burst_ = burst;
  level_ = std::min(level_, burst_);
}

double TokenBucket::level(int64_t now_ns) {
  refill(now_ns);
  return level_;
}

}  // namespace koi::gateway
