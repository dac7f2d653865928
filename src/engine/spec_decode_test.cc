#include "engine/spec_decode.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;

class VocabOnlyRunner final : public ModelRunner {
 public:
  explicit VocabOnlyRunner(int n_vocab) : n_vocab_(n_vocab) {}
  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return 64; }
  Status forward(const model::ForwardBatch&, float*) override { return ok_status(); }

 private:
  int n_vocab_;
};

TEST(SpecDecodeTest, ParsesMethodNames) {
  EXPECT_EQ(*parse_speculative_method("ngram"), SpeculativeMethod::kNgram);
  EXPECT_EQ(*parse_speculative_method("draft"), SpeculativeMethod::kDraftModel);
  EXPECT_EQ(parse_speculative_method("eagle").status().message(),
            "unknown speculative method 'eagle'; use 'ngram' (prompt lookup) or 'draft' (a draft model)");
}

TEST(SpecDecodeTest, ValidateNamesTheBadField) {
  VocabOnlyRunner target(512), small_vocab(256), draft(512);
  SpeculativeConfig c;
  EXPECT_TRUE(validate(c, target).ok());
  c.num_speculative_tokens = -1;
  EXPECT_EQ(validate(c, target).message(),
            "speculative: num_speculative_tokens is -1; it must be >= 0 (0 turns speculation off)");
  c.num_speculative_tokens = 4;
  c.prompt_lookup_min = 3;
  c.prompt_lookup_max = 2;
  EXPECT_EQ(validate(c, target).message(),
            "speculative: prompt lookup sizes are [3, 2]; need 1 <= prompt_lookup_min <= prompt_lookup_max");
  c.method = SpeculativeMethod::kDraftModel;
  EXPECT_EQ(validate(c, target).message(),
            "speculative: method 'draft' needs a draft model; load one that shares the target's tokenizer, or use "
            "'ngram'");
  c.draft_runner = &small_vocab;
  EXPECT_EQ(validate(c, target).message(),
            "speculative: the draft model has a vocabulary of 256 tokens but the target has 512; a draft model must "
            "use the target's tokenizer");
  c.draft_runner = &draft;
  EXPECT_EQ(validate(c, target).message(),
            "speculative: draft_num_kv_blocks is 0; give the draft model's KV cache at least one block");
  c.draft_num_kv_blocks = 8;
  EXPECT_TRUE(validate(c, target).ok());
}

TEST(SpecDecodeTest, PromptLookupProposesWhatFollowedTheLatestMatch) {
  const Ids tokens = {1, 2, 3, 9, 1, 2, 3, 7, 5, 1, 2, 3};
  EXPECT_EQ(propose_ngram(tokens, 1, 3, 2), (Ids{7, 5}));  // latest earlier "1 2 3"
  EXPECT_EQ(propose_ngram(tokens, 1, 3, 9), (Ids{7, 5, 1, 2, 3}));
  EXPECT_TRUE(propose_ngram(Ids{4, 5, 6}, 1, 3, 2).empty());
}

Request request_with(SamplingParams params, Ids drafts, std::vector<float> draft_probs = {}) {
  Request r("r", {0, 1}, std::move(params), 0, 0, 0, 99);
  r.spec_token_ids = std::move(drafts);
  r.spec_draft_probs = std::move(draft_probs);
  return r;
}

std::vector<int32_t> tokens_of(const std::vector<SampledToken>& sampled) {
  Ids out;
  for (const SampledToken& s : sampled) out.push_back(s.token);
  return out;
}

TEST(SpecDecodeTest, GreedyAcceptsDraftsEqualToTheArgmaxThenEmitsTheArgmax) {
  SamplingParams greedy;
  greedy.temperature = 0.0f;
  // Three rows over 4 tokens with argmaxes 2, 0, 3.
  const std::vector<float> logits = {0, 1, 5, 2, /**/ 4, 1, 0, 2, /**/ 0, 1, 2, 6};
  Request all = request_with(greedy, {2, 0});
  EXPECT_EQ(tokens_of(sample_with_drafts(all, logits, 4)), (Ids{2, 0, 3}));  // both accepted, bonus 3
  Request second_wrong = request_with(greedy, {2, 1});
  EXPECT_EQ(tokens_of(sample_with_drafts(second_wrong, logits, 4)), (Ids{2, 0}));
  // A wrong first draft is replaced by the argmax and ends the step.
  Request first_wrong = request_with(greedy, {3, 0});
  EXPECT_EQ(tokens_of(sample_with_drafts(first_wrong, logits, 4)), (Ids{2}));
}

TEST(SpecDecodeTest, PenaltiesSeeTheAcceptedDrafts) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.frequency_penalty = 10.0f;
  // Token 2 leads both rows, but once the accepted draft 2 is output it is penalized in row 1.
  const std::vector<float> logits = {0, 1, 5, 2, /**/ 0, 1, 5, 2};
  Request r = request_with(p, {2, 2});
  EXPECT_EQ(tokens_of(sample_with_drafts(r, logits, 4)), (Ids{2, 3}));
}

// The rejection rule at the level of one draft: d ~ q, verified against p. The emitted
// token must follow p (chi-square, 2 degrees of freedom: 13.8 at p = 0.001) and the draft
// must be accepted with probability sum_x min(p(x), q(x)).
TEST(SpecDecodeTest, RejectionSamplingEmitsTokensDistributedAsTheTarget) {
  constexpr int kV = 3, kTrials = 200000;
  const std::array<double, kV> p = {0.6, 0.3, 0.1};
  const std::vector<float> q = {0.2f, 0.3f, 0.5f};
  std::vector<float> logits(2 * kV);
  for (int x = 0; x < kV; ++x) logits[x] = logits[kV + x] = static_cast<float>(std::log(p[x]));
  Rng draft_rng(5);
  std::array<int, kV> counts{};
  int accepted = 0;
  Request r = request_with(SamplingParams{}, {});
  for (int trial = 0; trial < kTrials; ++trial) {
    r.spec_token_ids = {draw(q, draft_rng)};
    r.spec_draft_probs = q;
    const std::vector<SampledToken> out = sample_with_drafts(r, logits, kV);
    ++counts[out[0].token];
    accepted += static_cast<int>(out.size()) - 1;
  }
  double chi2 = 0;
  for (int x = 0; x < kV; ++x) chi2 += (counts[x] - p[x] * kTrials) * (counts[x] - p[x] * kTrials) / (p[x] * kTrials);
  EXPECT_LT(chi2, 13.8);
  EXPECT_NEAR(static_cast<double>(accepted) / kTrials, 0.2 + 0.3 + 0.1, 0.005);  // sum min(p, q)
}

}  // namespace
}  // namespace koi::engine
