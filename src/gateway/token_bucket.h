// TokenBucket: a rate limit of `rate_per_minute` units (requests or tokens) with a burst of
// `burst` units, refilled continuously. A take that is larger than the whole bucket is
// admitted when the bucket is full and leaves it in debt, so a request bigger than the burst is
// never starved. adjust() corrects an earlier charge (the real token count at the end of a
// request) and may also push the bucket into debt. Over any window of T seconds at most
// burst + rate*T/60 units (plus one oversized take) are admitted.
// The Fleet gives each tenant's RPM and TPM bucket a burst of its whole per-minute allowance
// (at least 1), so a tenant may spend a minute's allowance in any pattern (all at once, evenly,
// in bursts); after an empty bucket it gets the rate back continuously.
// Times are passed in (from a Clock) so tests are exact. Not thread-safe.
#pragma once

#include <cstdint>

namespace koi::gateway {

class TokenBucket {
 public:
  TokenBucket(double rate_per_minute, double burst, int64_t now_ns);

  // Takes `n` units and returns 0, or takes nothing and returns how many nanoseconds the
  // caller should wait before the take could succeed.
  int64_t try_take(double n, int64_t now_ns);
  // Adds `delta` units of charge (negative refunds); the level never exceeds the burst.
  void adjust(double delta, int64_t now_ns);
  // Changes the limit in place; the current level is kept (clamped to the new burst).
  void reconfigure(double rate_per_minute, double burst, int64_t now_ns);
  double level(int64_t now_ns);
  double rate_per_minute() const { return rate_per_minute_; }

 private:
  void refill(int64_t now_ns);
  double rate_per_minute_;
  double burst_;
  double level_;
  int64_t last_ns_;
};

}  // namespace koi::gateway
