#include "gateway/circuit_breaker.h"

namespace koi::gateway {

std::string_view breaker_state_name(BreakerState state) {
  switch (state) {
    case BreakerState::kClosed: return "closed";
    case BreakerState::kOpen: return "open";
    case BreakerState::kHalfOpen: return "half_open";
  }
  return "?";
}

bool CircuitBreaker::would_allow(int64_t now_ns) const {
  switch (state_) {
    case BreakerState::kClosed: return true;
    case BreakerState::kOpen: return now_ns - opened_at_ns_ >= open_ns_;
    case BreakerState::kHalfOpen: return !probe_in_flight_;
  }
  return false;
}

bool CircuitBreaker::allow(int64_t now_ns) {
  if (!would_allow(now_ns)) return false;
  if (state_ == BreakerState::kOpen) state_ = BreakerState::kHalfOpen;
  if (state_ == BreakerState::kHalfOpen) probe_in_flight_ = true;
  return true;
}

void CircuitBreaker::on_success() {
  state_ = BreakerState::kClosed;
  consecutive_failures_ = 0;
  probe_in_flight_ = false;
}

void CircuitBreaker::on_failure(int64_t now_ns) {
  probe_in_flight_ = false;
  if (state_ == BreakerState::kHalfOpen || ++consecutive_failures_ >= failure_threshold_) {
    state_ = BreakerState::kOpen;
    opened_at_ns_ = now_ns;
    consecutive_failures_ = 0;
  }
}

}  // namespace koi::gateway
