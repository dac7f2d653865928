#include "cluster/control_plane/autoscale.h"

#include <gtest/gtest.h>

namespace koi::cluster {
namespace {

ScaleView view() {
  ScaleView v;
  v.policy.enabled = true;
  v.policy.metric = AutoscaleMetric::kWaitingRequests;
  v.policy.target = 1.5;
  v.policy.scale_down_delay_seconds = 10;
  v.min_replicas = 1, v.max_replicas = 3;
  v.desired = 1, v.ready = 1;
  v.now = 100;
  return v;
}

TEST(AutoscaleTest, FixedAtMinWithoutAPolicy) {
  ScaleView v = view();
  v.policy.enabled = false;
  v.desired = 3;
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.desired, 1);
  EXPECT_EQ(d.reason, "Fixed");
  EXPECT_EQ(d.message, "fixed at replicas.min 1 (no autoscale)");
}

TEST(AutoscaleTest, ScalesUpAtOnceWithinMax) {
  ScaleView v = view();
  v.metric = 3;  // 1 x 3 / 1.5 = 2
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.reason, "ScaledUp");
  EXPECT_EQ(d.message, "1 -> 2 replicas: waitingRequests 3.00 per replica (target 1.5) over 1 ready");
  v.metric = 30;
  EXPECT_EQ(decide_scale(v).desired, 3);  // max
}

TEST(AutoscaleTest, HoldsWhileAScaleUpStarts) {
  ScaleView v = view();
  v.desired = 2, v.ready = 1, v.metric = 0;
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.reason, "ScaleUpInProgress");
  v.metric = 6;  // a further rise still counts: 1 x 6 / 1.5 = 4 -> max 3
  EXPECT_EQ(decide_scale(v).desired, 3);
}

TEST(AutoscaleTest, ScalesDownAfterTheDelayToThePeakOfTheDelay) {
  ScaleView v = view();
  v.desired = 3, v.ready = 3, v.metric = 0.4;  // 3 x 0.4 / 1.5 = 0.8 -> 1
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.desired, 3);
  EXPECT_EQ(d.reason, "ScaleDownPending");
  EXPECT_EQ(d.down_since, 100);
  EXPECT_EQ(d.down_max, 1);
  v.down_since = d.down_since, v.down_max = d.down_max;
  v.now = 105, v.metric = 0.9;  // 3 x 0.9 / 1.5 = 1.8 -> 2: a peak inside the delay
  d = decide_scale(v);
  EXPECT_EQ(d.down_max, 2);
  v.down_max = d.down_max;
  v.now = 110, v.metric = 0;
  d = decide_scale(v);
  EXPECT_EQ(d.reason, "ScaledDown");
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.down_since, 0);
}

TEST(AutoscaleTest, ARiseCancelsAPendingScaleDown) {
  ScaleView v = view();
  v.desired = 2, v.ready = 2, v.down_since = 95, v.down_max = 1;
  v.metric = 1.5;  // 2 x 1.5 / 1.5 = 2: steady
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.reason, "Steady");
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.down_since, 0);
}

TEST(AutoscaleTest, KeepsTheCountWithoutMetrics) {
  ScaleView v = view();
  v.desired = 2, v.ready = 0;
  ScaleDecision d = decide_scale(v);
  EXPECT_EQ(d.desired, 2);
  EXPECT_EQ(d.reason, "NoMetrics");
}

}  // namespace
}  // namespace koi::cluster
