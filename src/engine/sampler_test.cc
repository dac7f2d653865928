#include "engine/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace koi::engine {
namespace {

using Tokens = std::vector<int32_t>;

// Logits whose softmax at temperature 1 is exactly `probs`.
std::vector<float> log_of(const std::vector<double>& probs) {
  std::vector<float> l;
  for (double p : probs) l.push_back(static_cast<float>(std::log(p)));
  return l;
}

std::vector<float> probs_of(const SamplingParams& p, const std::vector<float>& logits, const Tokens& prompt = {},
                            const Tokens& output = {}) {
  std::vector<float> probs;
  sampling_probs(p, logits, prompt, output, &probs);
  return probs;
}

void expect_probs(const std::vector<float>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t t = 0; t < want.size(); ++t) EXPECT_NEAR(got[t], want[t], 1e-6) << "token " << t;
}

SamplingParams greedy() {
  SamplingParams p;
  p.temperature = 0.0f;
  return p;
}

TEST(SamplerTest, GreedyTakesArgmaxAndLowestIdOnTies) {
  Rng rng(1);
  EXPECT_EQ(sample(greedy(), rng, std::vector<float>{0.1f, 3.0f, -1.0f, 2.0f}, {}, {}).token, 1);
  EXPECT_EQ(sample(greedy(), rng, std::vector<float>{0.1f, 3.0f, 3.0f, 2.0f}, {}, {}).token, 1);
  expect_probs(probs_of(greedy(), {0.1f, 3.0f, -1.0f, 2.0f}), {0, 1, 0, 0});
}

TEST(SamplerTest, LogitBiasIsAdded) {
  SamplingParams p = greedy();
  p.logit_bias = {{3, 1.5f}};
  Rng rng(1);
  EXPECT_EQ(sample(p, rng, std::vector<float>{0.1f, 3.0f, -1.0f, 2.0f}, {}, {}).token, 3);
}

TEST(SamplerTest, RepetitionPenaltyDividesPositiveAndMultipliesNegativeSeenLogits) {
  SamplingParams p;
  p.repetition_penalty = 2.0f;
  // Seen: 0 (prompt) and 2 (output). Logits become {1, 1, -2, 0.5}.
  const auto probs = probs_of(p, {2.0f, 1.0f, -1.0f, 0.5f}, {0}, {2});
  const double z = std::exp(1.0) * 2 + std::exp(-2.0) + std::exp(0.5);
  expect_probs(probs, {std::exp(1.0) / z, std::exp(1.0) / z, std::exp(-2.0) / z, std::exp(0.5) / z});
}

TEST(SamplerTest, PresenceAndFrequencyPenaltiesCountOutputTokensOnly) {
  SamplingParams p;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  // Prompt token 0 is not penalized; output has token 1 twice and token 3 once.
  const auto probs = probs_of(p, {0.0f, 0.0f, 0.0f, 0.0f}, {0}, {1, 3, 1});
  const double l1 = -(0.25 + 2 * 0.5), l3 = -(0.25 + 0.5);
  const double z = 2 + std::exp(l1) + std::exp(l3);
  expect_probs(probs, {1 / z, std::exp(l1) / z, 1 / z, std::exp(l3) / z});
}

TEST(SamplerTest, TemperatureScalesLogits) {
  SamplingParams p;
  p.temperature = 0.5f;
  const auto probs = probs_of(p, {1.0f, 0.0f, -1.0f});
  const double z = std::exp(2.0) + 1 + std::exp(-2.0);
  expect_probs(probs, {std::exp(2.0) / z, 1 / z, std::exp(-2.0) / z});
}

TEST(SamplerTest, MinPDropsTokensBelowFractionOfMax) {
  SamplingParams p;
  p.min_p = 0.2f;  // threshold 0.1
  expect_probs(probs_of(p, log_of({0.5, 0.3, 0.15, 0.05})), {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0});
}

TEST(SamplerTest, TopKKeepsKMostLikelyAndTiesWithTheKth) {
  SamplingParams p;
  p.top_k = 2;
  expect_probs(probs_of(p, log_of({0.15, 0.5, 0.05, 0.3})), {0, 0.5 / 0.8, 0, 0.3 / 0.8});
  p.top_k = 1;
  expect_probs(probs_of(p, log_of({0.1, 0.4, 0.4, 0.1})), {0, 0.5, 0.5, 0});
}

TEST(SamplerTest, TopPKeepsSmallestSetReachingMass) {
  SamplingParams p;
  p.top_p = 0.7f;
  expect_probs(probs_of(p, log_of({0.05, 0.3, 0.15, 0.5})), {0, 0.3 / 0.8, 0, 0.5 / 0.8});
  p.top_p = 0.85f;
  expect_probs(probs_of(p, log_of({0.05, 0.3, 0.15, 0.5})), {0, 0.3 / 0.95, 0.15 / 0.95, 0.5 / 0.95});
  p.top_p = 0.01f;  // always at least one token
  expect_probs(probs_of(p, log_of({0.05, 0.3, 0.15, 0.5})), {0, 0, 0, 1});
}

TEST(SamplerTest, TopPIsTakenOverWhatTopKLeft) {
  SamplingParams p;
  p.top_p = 0.6f;
  expect_probs(probs_of(p, log_of({0.5, 0.3, 0.15, 0.05})), {0.5 / 0.8, 0.3 / 0.8, 0, 0});
  p.top_k = 2;  // mass left 0.8; 0.6 of it is 0.48, reached by token 0 alone
  expect_probs(probs_of(p, log_of({0.5, 0.3, 0.15, 0.05})), {1, 0, 0, 0});
}

TEST(SamplerTest, SamplingFollowsSoftmaxOfLogitsOverTemperature) {
  SamplingParams p;
  p.temperature = 0.7f;
  const std::vector<float> logits = {0.3f, -0.2f, 1.1f, 0.0f, 0.6f, -1.0f};
  std::vector<double> expected;
  double z = 0;
  for (float l : logits) z += std::exp(l / 0.7);
  for (float l : logits) expected.push_back(std::exp(l / 0.7) / z);
  constexpr int kSamples = 60000;
  std::vector<int> counts(logits.size(), 0);
  Rng rng(12345);
  for (int i = 0; i < kSamples; ++i) ++counts[sample(p, rng, logits, {}, {}).token];
  double chi2 = 0;
  for (size_t t = 0; t < logits.size(); ++t) {
    const double e = expected[t] * kSamples;
    chi2 += (counts[t] - e) * (counts[t] - e) / e;
  }
  EXPECT_LT(chi2, 20.52);  // chi-square, 5 degrees of freedom, p = 0.001
}

TEST(SamplerTest, SameSeedSameTokens) {
  SamplingParams p;
  const std::vector<float> logits = {0.3f, -0.2f, 1.1f, 0.0f, 0.6f, -1.0f};
  auto run = [&](uint64_t seed) {
    Rng rng(seed);
    Tokens out;
    for (int i = 0; i < 50; ++i) out.push_back(sample(p, rng, logits, {}, {}).token);
    return out;
  };
  EXPECT_EQ(run(7), run(7));
  EXPECT_NE(run(7), run(8));
}

TEST(SamplerTest, LogprobsComeFromRawLogits) {
  SamplingParams p = greedy();
  p.logit_bias = {{0, 10.0f}};  // changes the choice, not the reported logprobs
  p.logprobs = 2;
  Rng rng(1);
  const SampledToken s = sample(p, rng, log_of({0.1, 0.6, 0.3}), {}, {});
  EXPECT_EQ(s.token, 0);
  EXPECT_NEAR(s.logprob, std::log(0.1), 1e-6);
  ASSERT_EQ(s.top_logprobs.size(), 2u);
  EXPECT_EQ(s.top_logprobs[0].token, 1);
  EXPECT_NEAR(s.top_logprobs[0].logprob, std::log(0.6), 1e-6);
  EXPECT_EQ(s.top_logprobs[1].token, 2);
  EXPECT_NEAR(s.top_logprobs[1].logprob, std::log(0.3), 1e-6);
  p.logprobs = -1;
  EXPECT_TRUE(sample(p, rng, log_of({0.1, 0.6, 0.3}), {}, {}).top_logprobs.empty());
}

TEST(SamplingParamsTest, ValidateNamesTheField) {
  SamplingParams p;
  EXPECT_TRUE(validate(p, 10).ok());
  p.top_p = 0.0f;
  EXPECT_EQ(validate(p, 10).message(), "top_p is 0; it must be in (0, 1]");
  p = SamplingParams{};
  p.logit_bias = {{10, 1.0f}};
  EXPECT_EQ(validate(p, 10).message(), "logit_bias names token 10, outside the vocabulary [0, 10)");
  p = SamplingParams{};
  p.stop = {"x", ""};
  EXPECT_EQ(validate(p, 10).message(), "stop contains an empty string; remove it");
  p = SamplingParams{};
  p.max_tokens = 0;
  EXPECT_EQ(validate(p, 10).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(validate(p, 10).message(), "max_tokens is 0; it must be >= 1");
}

}  // namespace
}  // namespace koi::engine
