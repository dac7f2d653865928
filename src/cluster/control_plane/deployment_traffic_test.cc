#include "cluster/control_plane/deployment_traffic.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <cmath>

namespace koi::cluster {
namespace {

// One replica's counters over an interval: `finished` requests, `errors`, and their TTFT and
// end-to-end observations in (0, 0.1] s or (0.1, 1] s.
ServeSample delta(double finished, double errors, double fast, double slow) {
  ServeSample d;
  d.finished = finished, d.errors = errors;
  d.ttft_buckets = {{0.1, fast}, {1.0, fast + slow}, {INFINITY, fast + slow}};
  d.ttft_count = fast + slow;
  d.e2e_buckets = {{0.1, 0}, {1.0, fast + slow}, {INFINITY, fast + slow}};
  d.e2e_count = fast + slow;
  d.itl_buckets = {{0.01, 2 * (fast + slow)}, {INFINITY, 2 * (fast + slow)}};
  d.itl_count = 2 * (fast + slow);
  d.generation_tokens = 3 * (fast + slow);
  d.running = 1, d.waiting = 2, d.kv_usage = 0.5;
  return d;
}

TEST(DeploymentTrafficTest, RatesAndPercentilesOverTheReplicas) {
  ServeSample b = delta(10, 2, 0, 8);
  b.kv_usage = 0.75;
  const TrafficPoint p = traffic_point({delta(6, 0, 4, 0), b}, 2.0, 100.0);
  EXPECT_EQ(p.time, 100.0);
  EXPECT_EQ(p.replicas, 2);
  EXPECT_DOUBLE_EQ(p.qps, (6 + 10 + 2) / 2.0);
  EXPECT_DOUBLE_EQ(p.errors_per_second, 1.0);
  // 12 TTFTs: 4 <= 100 ms, 8 in (100, 1000] ms. The median (rank 6) is a quarter into the second
  // bucket; the p99 (rank 11.88) near its top.
  ASSERT_TRUE(p.ttft_p50_ms && p.ttft_p99_ms);
  EXPECT_NEAR(*p.ttft_p50_ms, 100 + 900 * 2.0 / 8, 1e-9);
  EXPECT_NEAR(*p.ttft_p99_ms, 100 + 900 * 7.88 / 8, 1e-9);
  ASSERT_TRUE(p.e2e_p50_ms);
  EXPECT_NEAR(*p.e2e_p50_ms, 100 + 900 * 6.0 / 12, 1e-9);
  ASSERT_TRUE(p.itl_p50_ms);  // 24 gaps, all <= 10 ms: the median halfway into the first bucket
  EXPECT_NEAR(*p.itl_p50_ms, 5.0, 1e-9);
  EXPECT_DOUBLE_EQ(p.tokens_per_second, 3 * 12 / 2.0);
  EXPECT_EQ(p.running, 2);
  EXPECT_EQ(p.waiting, 4);
  EXPECT_EQ(p.kv_usage, 0.75);  // the fullest replica
}

TEST(DeploymentTrafficTest, AnIdleIntervalHasNoLatency) {
  const TrafficPoint p = traffic_point({delta(0, 0, 0, 0)}, 1.0, 5.0);
  EXPECT_EQ(p.qps, 0);
  EXPECT_FALSE(p.ttft_p50_ms || p.ttft_p99_ms || p.e2e_p50_ms || p.e2e_p99_ms || p.itl_p50_ms || p.itl_p99_ms);
  EXPECT_EQ(p.tokens_per_second, 0);
  const boost::json::object j = traffic_point_json(p);
  EXPECT_TRUE(j.at("ttftP50Ms").is_null());
  EXPECT_EQ(j.at("qps").as_double(), 0.0);
  EXPECT_EQ(traffic_point({}, 1.0, 5.0).replicas, 0);
}

TEST(DeploymentTrafficTest, HistoryKeepsTheNewestPointsPerDeployment) {
  TrafficHistory h;
  for (size_t i = 0; i < kTrafficPoints + 5; ++i) {
    TrafficPoint p;
    p.time = static_cast<double>(i);
    h.record("alpha", "web", p);
  }
  h.record("beta", "web", TrafficPoint{});
  const std::vector<TrafficPoint> points = h.points("alpha", "web");
  ASSERT_EQ(points.size(), kTrafficPoints);
  EXPECT_EQ(points.front().time, 5.0);
  EXPECT_EQ(points.back().time, static_cast<double>(kTrafficPoints + 4));
  EXPECT_EQ(h.points("beta", "web").size(), 1u);
  EXPECT_TRUE(h.points("alpha", "other").empty());
  h.forget("alpha", "web");
  EXPECT_TRUE(h.points("alpha", "web").empty());
  EXPECT_EQ(h.points("beta", "web").size(), 1u);
}

}  // namespace
}  // namespace koi::cluster
