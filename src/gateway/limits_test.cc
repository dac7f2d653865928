// Token bucket and circuit breaker, exact under an injected clock.
#include <gtest/gtest.h>

#include "base/clock.h"
#include "gateway/circuit_breaker.h"
#include "gateway/fleet.h"
#include "gateway/token_bucket.h"

namespace koi::gateway {
namespace {

constexpr int64_t kSec = 1000000000;

TEST(TokenBucket, AdmitsTheBurstThenRefillsAtTheRate) {
  TokenBucket b(60, 3, 0);  // one per second, burst 3
  EXPECT_EQ(b.try_take(1, 0), 0);
  EXPECT_EQ(b.try_take(1, 0), 0);
  EXPECT_EQ(b.try_take(1, 0), 0);
  EXPECT_EQ(b.try_take(1, 0), kSec);           // empty: wait one second
  EXPECT_EQ(b.try_take(1, kSec / 2), kSec / 2);  // half refilled
  EXPECT_EQ(b.try_take(1, kSec), 0);
  EXPECT_DOUBLE_EQ(b.level(100 * kSec), 3.0);  // never above the burst
}

TEST(TokenBucket, OversizedTakeIsAdmittedWhenFullAndLeavesDebt) {
  TokenBucket b(600, 10, 0);
  EXPECT_EQ(b.try_take(25, 0), 0);
  EXPECT_DOUBLE_EQ(b.level(0), -15.0);
  EXPECT_EQ(b.try_take(25, 0), 25 * kSec / 10);  // needs the full burst (10) back: 25 units at 10/s
}

TEST(TokenBucket, AdjustCorrectsTheChargeBothWays) {
  TokenBucket b(60, 100, 0);
  EXPECT_EQ(b.try_take(40, 0), 0);
  b.adjust(30, 0);  // the real usage was 70
  EXPECT_DOUBLE_EQ(b.level(0), 30.0);
  b.adjust(-500, 0);  // refunds never exceed the burst
  EXPECT_DOUBLE_EQ(b.level(0), 100.0);
}

TEST(TokenBucket, OneMinuteAdmitsRateNotMoreThanBurstOver) {
  TokenBucket b(600, 10, 0);
  int admitted = 0;
  for (int64_t t = 0; t < 60 * kSec; t += kSec / 100) admitted += b.try_take(1, t) == 0;
  EXPECT_EQ(admitted, 600 + 10 - 1);  // burst + 59.99 s of refill
}

// A tenant may use its per-minute allowance in any pattern: the whole of it is admitted
// whether it comes evenly spread, all at once or in bursts, and where the allowance is spent
// at one instant the next request at that instant is refused (between bursts the bucket
// refills, so a later burst may find more than what is left of the minute).
TEST(TenantLimits, TheWholePerMinuteAllowanceIsAdmittedEvenlyAllAtOnceOrInBursts) {
  GatewayConfig config = *parse_config(R"(
models: [{name: m, versions: [{name: v1, replicas: ["http://127.0.0.1:9001"]}]}]
tenants: [{name: r, rpm: 5}, {name: t, tpm: 1000}]
)", "gw.yaml");
  struct Pattern {
    const char* name;
    const char* tenant;
    int64_t tokens;                 // per request
    std::vector<double> seconds;    // when each request of the minute comes
    bool next_is_refused;           // one more at the last instant
  };
  const Pattern patterns[] = {
      {"rpm evenly", "r", 0, {0, 12, 24, 36, 48}, false},
      {"rpm all at once", "r", 0, {0, 0, 0, 0, 0}, true},
      {"rpm in bursts", "r", 0, {0, 0, 59, 59, 59}, false},
      {"rpm at the end", "r", 0, {59.9, 59.9, 59.9, 59.9, 59.9}, true},
      {"tpm evenly", "t", 100, {0, 6, 12, 18, 24, 30, 36, 42, 48, 54}, false},
      {"tpm all at once", "t", 100, {0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, true},
      {"tpm in bursts", "t", 100, {0, 0, 0, 0, 30, 30, 58, 58, 58, 58}, false},
  };
  for (const Pattern& p : patterns) {
    SCOPED_TRACE(p.name);
    FakeClock clock;
    Fleet fleet(config, clock, 1);
    for (double s : p.seconds) {
      clock.set_ns(static_cast<int64_t>(s * kSec));
      EXPECT_EQ(fleet.admit(p.tenant, "m", p.tokens).status, 200) << "at " << s << " s";
      fleet.finish(p.tenant, p.tokens, p.tokens);
    }
    if (p.next_is_refused) EXPECT_EQ(fleet.admit(p.tenant, "m", p.tokens).status, 429);
  }
}

TEST(CircuitBreaker, OpensAfterThresholdThenProbesOnce) {
  CircuitBreaker br(3, 5 * kSec);
  br.on_failure(0);
  br.on_failure(0);
  EXPECT_EQ(br.state(), BreakerState::kClosed);
  br.on_success();  // resets the run
  br.on_failure(0), br.on_failure(0), br.on_failure(1);
  EXPECT_EQ(br.state(), BreakerState::kOpen);
  EXPECT_FALSE(br.allow(5 * kSec));  // 4.999... s after opening at t=1
  EXPECT_TRUE(br.would_allow(5 * kSec + 1));
  EXPECT_TRUE(br.allow(5 * kSec + 1));
  EXPECT_EQ(br.state(), BreakerState::kHalfOpen);
  EXPECT_FALSE(br.allow(5 * kSec + 2));  // one probe only
  br.on_failure(6 * kSec);
  EXPECT_EQ(br.state(), BreakerState::kOpen);
  EXPECT_FALSE(br.allow(10 * kSec));
  EXPECT_TRUE(br.allow(11 * kSec));
  br.on_success();
  EXPECT_EQ(br.state(), BreakerState::kClosed);
  EXPECT_TRUE(br.allow(11 * kSec));
  EXPECT_EQ(breaker_state_name(BreakerState::kHalfOpen), "half_open");
}

}  // namespace
}  // namespace koi::gateway
