// CircuitBreaker: the per-replica breaker. Closed: traffic flows and consecutive failures are
// counted; `failure_threshold` of them in a row open it. Open: no traffic for `open_ns`; after
// that the next allow() turns it half-open and lets exactly one probe through (a request or a
// health check). Half-open: the probe's success closes it, its failure re-opens it for another
// `open_ns`. Times are passed in. Not thread-safe (the gateway guards it with its state lock).
#pragma once

#include <cstdint>
#include <string_view>

namespace koi::gateway {

enum class BreakerState { kClosed = 0, kOpen = 1, kHalfOpen = 2 };
std::string_view breaker_state_name(BreakerState state);

class CircuitBreaker {
 public:
  CircuitBreaker(int failure_threshold, int64_t open_ns)
      : failure_threshold_(failure_threshold), open_ns_(open_ns) {}

  // Whether a request may go to this replica now; in half-open state the first caller gets
  // the probe and later callers get false until the probe reports back.
  bool allow(int64_t now_ns);
  // Whether allow() would say yes, without taking the probe (for routing candidates).
  bool would_allow(int64_t now_ns) const;
  void on_success();
  void on_failure(int64_t now_ns);
  BreakerState state() const { return state_; }

 private:
  int failure_threshold_;
  int64_t open_ns_;
  BreakerState state_ = BreakerState::kClosed;
  int consecutive_failures_ = 0;
  int64_t opened_at_ns_ = 0;
  bool probe_in_flight_ = false;
};

}  // namespace koi::gateway
