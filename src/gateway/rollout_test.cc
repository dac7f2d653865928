// The rollout state machine.
#include "gateway/rollout.h"

#include <gtest/gtest.h>

namespace koi::gateway {
namespace {

RolloutPlan plan() { return RolloutPlan{{10, 50, 100}, 0.05, 3.0, 20}; }

TEST(RolloutController, AdvancesThroughTheStepsWhenHealthy) {
  RolloutController c(plan());
  EXPECT_EQ(c.weight(), 10);
  EXPECT_EQ(c.observe({5, 0, 0.05}, {45, 0, 0.45}), RolloutAction::kHold);  // too few requests
  EXPECT_EQ(c.observe({20, 1, 0.2}, {180, 0, 1.8}), RolloutAction::kAdvance);  // 5% is not above 5%
  EXPECT_EQ(c.weight(), 50);
  EXPECT_EQ(c.observe({100, 0, 1.0}, {100, 0, 1.0}), RolloutAction::kAdvance);
  EXPECT_EQ(c.weight(), 100);
  EXPECT_EQ(c.observe({200, 0, 2.0}, {0, 0, 0}), RolloutAction::kDone);
  EXPECT_TRUE(c.finished());
}

TEST(RolloutController, RollsBackOnErrorsEvenBeforeAFullWindow) {
  RolloutController c(plan());
  EXPECT_EQ(c.observe({3, 1, 0.0}, {30, 0, 0.3}), RolloutAction::kHold);  // 1 error <= 0.05 * 20
  EXPECT_EQ(c.observe({4, 2, 0.0}, {30, 0, 0.3}), RolloutAction::kRollback);
  EXPECT_EQ(c.weight(), 0);
  EXPECT_EQ(c.reason(), "error rate 0.500 > 0.050 (2 of 4 requests)");
  EXPECT_EQ(c.observe({100, 0, 1.0}, {100, 0, 1.0}), RolloutAction::kRollback);  // terminal
}

TEST(RolloutController, RollsBackOnLatency) {
  RolloutController c(plan());
  EXPECT_EQ(c.observe({20, 0, 20 * 0.4}, {100, 0, 100 * 0.1}), RolloutAction::kRollback);
  EXPECT_EQ(c.reason(), "mean latency 0.400s > 3 x 0.100s of the old version");
}

TEST(RolloutPlan, StepsMustIncrease) {
  EXPECT_EQ(validate({{50, 20}, 0.05, 3, 20}).message(), "--steps must increase within (0, 100]; got 20 after 50");
  EXPECT_TRUE(validate(plan()).ok());
}

}  // namespace
}  // namespace koi::gateway
