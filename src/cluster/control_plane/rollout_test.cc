#include "cluster/control_plane/rollout.h"

#include <gtest/gtest.h>

namespace koi::cluster {
namespace {

RolloutView view(int desired) {
  RolloutView v;
  v.desired = desired;
  v.steps = {10, 50, 100};
  v.step_seconds = 30;
  v.now = 1000;
  v.old_replicas = desired;
  return v;
}

SloVerdict passing() {
  SloVerdict s;
  s.enough = true;
  return s;
}

TEST(RolloutTest, StartsOneExtraReplicaThenWaitsForIt) {
  RolloutView v = view(2);
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kStartReplica);
  v.new_replicas = 1;
  RolloutDecision d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kWait);
  EXPECT_EQ(d.reason, "WaitingForReplica");
  EXPECT_EQ(d.message, "0 of 1 new replicas ready");
}

TEST(RolloutTest, WalksTheStepsOfOneReplicaWithoutDoubling) {
  RolloutView v = view(1);
  v.new_replicas = 1, v.new_ready = 1;
  RolloutDecision d = decide_rollout(v);
  ASSERT_EQ(d.action, RolloutAction::kSetWeight);
  EXPECT_EQ(d.weight, 10);
  v.weight = 10, v.weight_since = 1000, v.now = 1029;
  d = decide_rollout(v);
  EXPECT_EQ(d.reason, "Observing");
  EXPECT_EQ(d.message, "step 1 of 3 (10%): observing for 30 s from 1970-01-01T00:16:40Z");
  v.now = 1030;
  EXPECT_EQ(decide_rollout(v).reason, "AwaitingTraffic");
  v.slo = passing();
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kNextStep);
  v.step = 1;
  d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kSetWeight);
  EXPECT_EQ(d.weight, 50);
  v.step = 2, v.weight = 50;
  d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kSetWeight);  // N = 1: the one new replica is enough at 100%
  EXPECT_EQ(d.weight, 100);
  v.weight = 100, v.weight_since = 1030, v.now = 1060;
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kComplete);  // the old replica stayed until here
}

TEST(RolloutTest, LastStepReplacesOldReplicasOneAtATime) {
  RolloutView v = view(3);
  v.step = 2, v.weight = 50, v.new_replicas = 2, v.new_ready = 2, v.old_replicas = 2;  // 4 = N + 1
  EXPECT_EQ(replicas_for_step(3, v.steps, 1), 2);  // ceil(3 * 50%)
  EXPECT_EQ(replicas_for_step(3, v.steps, 0), 1);
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kRetireOld);
  v.old_replicas = 1, v.draining = 1;
  RolloutDecision d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kWait);
  EXPECT_EQ(d.reason, "Surge");
  v.draining = 0;
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kStartReplica);
  v.new_replicas = 3, v.new_ready = 3;
  d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kSetWeight);
  EXPECT_EQ(d.weight, 100);
}

TEST(RolloutTest, RollsBackOnAFailedReplicaOrABrokenSlo) {
  RolloutView v = view(1);
  v.new_replicas = 1;
  v.new_failure = "replica d-v2-1 failed: exit code 1";
  RolloutDecision d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kRollback);
  EXPECT_EQ(d.reason, "ReplicaFailed");
  EXPECT_EQ(d.message, "replica d-v2-1 failed: exit code 1");
  v.new_failure.clear();
  v.new_ready = 1, v.weight = 10;
  v.slo.breached = true, v.slo.message = "bad";
  d = decide_rollout(v);
  EXPECT_EQ(d.action, RolloutAction::kRollback);
  EXPECT_EQ(d.reason, "SloBreached");
  v.weight = 0;  // no traffic yet: what it measured is not its own
  EXPECT_EQ(decide_rollout(v).action, RolloutAction::kSetWeight);
}

TEST(RolloutTest, JudgesErrorRateOverEnoughRequestsOrClearErrors) {
  SloPolicy slo;
  slo.max_error_rate = 0.05, slo.min_requests = 20;
  SloWindow w{.requests = 10, .errors = 1};
  SloVerdict v = judge_slo(slo, w);
  EXPECT_FALSE(v.breached);  // 1 error in 10: too early to say
  EXPECT_FALSE(v.enough);
  w.errors = 2;  // 2 > 0.05 x 20: clear already
  v = judge_slo(slo, w);
  EXPECT_TRUE(v.breached);
  EXPECT_EQ(v.slo, "maxErrorRate");
  EXPECT_EQ(v.message, "error rate 0.200 (2 of 10 requests) is above maxErrorRate 0.05");
  w = SloWindow{.requests = 40, .errors = 2};
  v = judge_slo(slo, w);
  EXPECT_FALSE(v.breached);  // 0.05 is not above 0.05
  EXPECT_TRUE(v.enough);
}

TEST(RolloutTest, JudgesTtftWhenAsked) {
  SloPolicy slo;
  slo.min_requests = 5;
  SloWindow w{.requests = 5, .errors = 0, .ttft_count = 5, .ttft_p99_ms = 900};
  EXPECT_FALSE(judge_slo(slo, w).breached);  // p99TtftMs 0: not judged
  slo.p99_ttft_ms = 500;
  SloVerdict v = judge_slo(slo, w);
  EXPECT_TRUE(v.breached);
  EXPECT_EQ(v.slo, "p99TtftMs");
  EXPECT_EQ(v.message, "p99 time to first token 900 ms (over 5 requests) is above p99TtftMs 500");
  w.ttft_count = 4;
  EXPECT_FALSE(judge_slo(slo, w).breached);
}

}  // namespace
}  // namespace koi::cluster
