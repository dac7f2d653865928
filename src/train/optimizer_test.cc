#include "train/optimizer.h"

#include <gtest/gtest.h>

#include <cmath>

namespace koi::train {
namespace {

TEST(LrSchedule, WarmupThenCosineThenFloor) {
  const LrSchedule s{.lr = 1e-3f, .min_lr = 1e-4f, .warmup_steps = 100, .decay_steps = 2000};
  EXPECT_FLOAT_EQ(lr_at(s, 0), 1e-3f / 101);
  EXPECT_FLOAT_EQ(lr_at(s, 99), 1e-3f * 100 / 101);
  EXPECT_FLOAT_EQ(lr_at(s, 100), 1e-3f);
  EXPECT_FLOAT_EQ(lr_at(s, 1050), 5.5e-4f);  // halfway: min + (lr - min) / 2
  EXPECT_FLOAT_EQ(lr_at(s, 2000), 1e-4f);
  EXPECT_FLOAT_EQ(lr_at(s, 5000), 1e-4f);
}

TEST(ClipGradNorm, ScalesOnlyAboveTheLimit) {
  std::vector<float> g{3.0f, 4.0f};
  EXPECT_FLOAT_EQ(clip_grad_norm(g, 10.0f), 5.0f);
  EXPECT_EQ(g, (std::vector<float>{3.0f, 4.0f}));
  EXPECT_FLOAT_EQ(clip_grad_norm(g, 1.0f), 5.0f);
  EXPECT_NEAR(g[0], 0.6f, 1e-6);
  EXPECT_NEAR(g[1], 0.8f, 1e-6);
}

// The first AdamW step moves every parameter by lr * sign(grad) (m/sqrt(v) = +-1 after bias
// correction), plus decoupled decay on the tensors that decay.
TEST(AdamW, FirstStepIsSignTimesLrPlusDecay) {
  std::vector<ParamTensor> layout{{"w", {2}, 0, 2, true}, {"norm", {1}, 2, 1, false}};
  std::vector<float> params{1.0f, -2.0f, 3.0f};
  const std::vector<float> grads{0.5f, -0.01f, 2.0f};
  AdamW opt({.beta1 = 0.9f, .beta2 = 0.95f, .eps = 0.0f, .weight_decay = 0.1f}, 3);
  opt.step(params, grads, layout, 0.01f);
  EXPECT_NEAR(params[0], 1.0f * (1 - 0.001f) - 0.01f, 1e-6);
  EXPECT_NEAR(params[1], -2.0f * (1 - 0.001f) + 0.01f, 1e-6);
  EXPECT_NEAR(params[2], 3.0f - 0.01f, 1e-6);  // no decay on norms
  EXPECT_EQ(opt.steps(), 1);
  EXPECT_NEAR(opt.m()[0], 0.05f, 1e-7);
  EXPECT_NEAR(opt.v()[2], 0.2f, 1e-6);
}

}  // namespace
}  // namespace koi::train
