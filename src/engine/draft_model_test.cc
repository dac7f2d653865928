// The draft-model proposer alone (KV bookkeeping: rollback, room, failures) and inside the
// engine over small fake models: greedy output equal to the target's own, acceptance
// exactly 1 when the draft is the target, the sampling distribution unchanged when the
// draft's q differs from p, and no draft block leaked.
#include "engine/draft_model.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>

#include "engine/engine.h"

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;
// Logits of the next token as a function of the whole sequence so far.
using LogitFn = std::function<void(std::span<const int32_t> seq, float* logits)>;

// A model that keeps token ids in a paged cache exactly as a real one keeps K and V: it
// writes each batch token to the slot its block table gives and computes logits from the
// sequence read back through the block table, so a stale or misplaced draft KV entry
// changes the output, and a position never written fails the forward.
class PagedFakeRunner final : public ModelRunner {
 public:
  PagedFakeRunner(int n_vocab, int num_blocks, int block_size, LogitFn fn)
      : n_vocab_(n_vocab), block_size_(block_size), fn_(std::move(fn)),
        cache_(static_cast<size_t>(num_blocks) * block_size, -1) {}

  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return 256; }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    if (fail_next_) {
      fail_next_ = false;
      return Status::unavailable("injected draft failure");
    }
    num_tokens_seen_ += batch.num_tokens();
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      const auto& table = batch.sequences[batch.seq_index[t]].block_table;
      if (batch.positions[t] / block_size_ >= static_cast<int>(table.size())) {
        return Status::internal("block table too short");
      }
      cache_[slot(table, batch.positions[t])] = batch.token_ids[t];
    }
    for (size_t row = 0; row < batch.logit_indices.size(); ++row) {
      const int32_t t = batch.logit_indices[row];
      const auto& table = batch.sequences[batch.seq_index[t]].block_table;
      Ids seq;
      for (int pos = 0; pos <= batch.positions[t]; ++pos) seq.push_back(cache_[slot(table, pos)]);
      if (std::find(seq.begin(), seq.end(), -1) != seq.end()) return Status::internal("read an unwritten slot");
      fn_(seq, logits + row * n_vocab_);
    }
    return ok_status();
  }

  int64_t num_tokens_seen_ = 0;
  bool fail_next_ = false;

 private:
  size_t slot(std::span<const int32_t> table, int pos) const {
    return static_cast<size_t>(table[pos / block_size_]) * block_size_ + pos % block_size_;
  }
  int n_vocab_, block_size_;
  LogitFn fn_;
  Ids cache_;
};

constexpr int kVocab = 32;

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Pseudo-random logits over kVocab that depend on every token of the sequence (salted, so
// two salts are two different models).
LogitFn hashed_model(uint64_t salt) {
  return [salt](std::span<const int32_t> seq, float* logits) {
    uint64_t h = salt;
    for (int32_t t : seq) h = mix(h ^ static_cast<uint64_t>(t + 1));
    for (int v = 0; v < kVocab; ++v) logits[v] = static_cast<float>(mix(h ^ (0x9E37ull * (v + 1))) % 1000) / 1000.0f;
  };
}

Ids reference_greedy(const LogitFn& fn, Ids seq, int n) {
  std::vector<float> logits(kVocab);
  Ids out;
  for (int i = 0; i < n; ++i) {
    fn(seq, logits.data());
    out.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    seq.push_back(out.back());
  }
  return out;
}

Ids prompt_of(int len, int32_t salt) {
  Ids p;
  for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(mix(static_cast<uint64_t>(salt * 7919 + i)) % kVocab));
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// A request that has been prefilled by the target: all tokens but the last computed.
Request decoding_request(const std::string& id, Ids tokens) {
  Request r(id, std::move(tokens), greedy(100), 0, 0, 0, 1);
  r.num_computed_tokens = r.num_tokens() - 1;
  r.status = RequestStatus::kRunning;
  return r;
}

// Appends tokens as verification would and marks all but the last computed.
void accept(Request& r, const Ids& tokens) {
  r.token_ids.insert(r.token_ids.end(), tokens.begin(), tokens.end());
  r.num_computed_tokens = r.num_tokens() - 1;
}

TEST(DraftModelProposerTest, KeepsExactlyTheAcceptedPrefixAndRecomputesTheRest) {
  const LogitFn fn = hashed_model(1);
  PagedFakeRunner runner(kVocab, 16, 4, fn);
  DraftModelProposer proposer(runner, 16, 4, 64);
  Request r = decoding_request("a", prompt_of(5, 1));

  // Round 0 feeds the 5 prompt tokens, rounds 1 and 2 the drafts d1 and d2.
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 3}}).ok());
  EXPECT_EQ(r.spec_token_ids, reference_greedy(fn, r.token_ids, 3));
  EXPECT_TRUE(r.spec_draft_probs.empty());  // greedy drafts are point masses
  EXPECT_EQ(runner.num_tokens_seen_, 5 + 2);
  EXPECT_EQ(proposer.num_cached_tokens("a"), 7);
  EXPECT_EQ(proposer.pool().num_free_blocks(), 16 - 2);

  // d1 accepted, d2 rejected and replaced: the draft KV keeps prompt + d1 and computes only
  // the replacement before drafting again.
  const Ids drafts = r.spec_token_ids;
  accept(r, {drafts[0], static_cast<int32_t>((drafts[1] + 1) % kVocab)});
  runner.num_tokens_seen_ = 0;
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 3}}).ok());
  EXPECT_EQ(r.spec_token_ids, reference_greedy(fn, r.token_ids, 3));
  EXPECT_EQ(runner.num_tokens_seen_, 1 + 2);
  EXPECT_EQ(proposer.num_cached_tokens("a"), 7 + 2);

  // All three accepted plus a bonus token: d1 and d2 were fed, so d3 and the bonus remain.
  Ids all = r.spec_token_ids;
  all.push_back(5);
  accept(r, all);
  runner.num_tokens_seen_ = 0;
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 3}}).ok());
  EXPECT_EQ(r.spec_token_ids, reference_greedy(fn, r.token_ids, 3));
  EXPECT_EQ(runner.num_tokens_seen_, 2 + 2);

  // Nothing verified (the request was not scheduled): the last token is fed again.
  runner.num_tokens_seen_ = 0;
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 3}}).ok());
  EXPECT_EQ(r.spec_token_ids, reference_greedy(fn, r.token_ids, 3));
  EXPECT_EQ(runner.num_tokens_seen_, 1 + 2);

  proposer.free("a");
  EXPECT_EQ(proposer.num_cached_tokens("a"), 0);
  EXPECT_EQ(proposer.pool().num_free_blocks(), 16);
}

TEST(DraftModelProposerTest, RequestWithoutRoomGetsNoDraftsUntilBlocksAreFreed) {
  PagedFakeRunner runner(kVocab, 2, 4, hashed_model(1));
  DraftModelProposer proposer(runner, 2, 4, 64);
  Request a = decoding_request("a", prompt_of(5, 1));
  Request b = decoding_request("b", prompt_of(3, 2));
  // a needs 5 + 3 - 1 = 7 positions: both blocks; b finds none.
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&a, 3}, {&b, 2}}).ok());
  EXPECT_EQ(a.spec_token_ids.size(), 3u);
  EXPECT_TRUE(b.spec_token_ids.empty());
  EXPECT_EQ(proposer.pool().num_free_blocks(), 0);
  proposer.free("a");
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&b, 2}}).ok());
  EXPECT_EQ(b.spec_token_ids, reference_greedy(hashed_model(1), b.token_ids, 2));
}

TEST(DraftModelProposerTest, LongCatchUpIsChunkedByTheTokenBudget) {
  const LogitFn fn = hashed_model(1);
  PagedFakeRunner runner(kVocab, 16, 4, fn);
  DraftModelProposer proposer(runner, 16, 4, 4);  // 4 tokens per proposal
  Request a = decoding_request("a", prompt_of(10, 1));
  Request b = decoding_request("b", prompt_of(3, 2));
  const std::vector<DraftRequest> both = {{&a, 2}, {&b, 2}};
  ASSERT_TRUE(proposer.propose(both).ok());
  EXPECT_EQ(proposer.num_cached_tokens("a"), 4);
  EXPECT_EQ(proposer.num_cached_tokens("b"), 0);
  EXPECT_TRUE(a.spec_token_ids.empty());
  ASSERT_TRUE(proposer.propose(both).ok());
  EXPECT_EQ(proposer.num_cached_tokens("a"), 8);
  EXPECT_TRUE(a.spec_token_ids.empty());
  // a's last 2 tokens and its draft d1; b takes the 2 tokens of budget left.
  runner.num_tokens_seen_ = 0;
  ASSERT_TRUE(proposer.propose(both).ok());
  EXPECT_EQ(a.spec_token_ids, reference_greedy(fn, a.token_ids, 2));
  EXPECT_EQ(proposer.num_cached_tokens("b"), 2);
  EXPECT_TRUE(b.spec_token_ids.empty());
  EXPECT_EQ(runner.num_tokens_seen_, 2 + 2 + 1);
}

TEST(DraftModelProposerTest, FailedForwardLeavesNoDraftsAndNoTrustedKv) {
  const LogitFn fn = hashed_model(1);
  PagedFakeRunner runner(kVocab, 8, 4, fn);
  DraftModelProposer proposer(runner, 8, 4, 64);
  Request r = decoding_request("a", prompt_of(6, 3));
  runner.fail_next_ = true;
  const Status failed = proposer.propose(std::vector<DraftRequest>{{&r, 2}});
  EXPECT_EQ(failed.message(), "injected draft failure");
  EXPECT_TRUE(r.spec_token_ids.empty());
  EXPECT_EQ(proposer.num_cached_tokens("a"), 0);
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 2}}).ok());
  EXPECT_EQ(r.spec_token_ids, reference_greedy(fn, r.token_ids, 2));
}

TEST(DraftModelProposerTest, SampledDraftsCarryTheirDistribution) {
  PagedFakeRunner runner(kVocab, 8, 4, hashed_model(1));
  DraftModelProposer proposer(runner, 8, 4, 64);
  Request r = decoding_request("a", prompt_of(4, 5));
  r.params = SamplingParams{};  // temperature 1
  ASSERT_TRUE(proposer.propose(std::vector<DraftRequest>{{&r, 3}}).ok());
  ASSERT_EQ(r.spec_token_ids.size(), 3u);
  ASSERT_EQ(r.spec_draft_probs.size(), 3u * kVocab);
  for (size_t i = 0; i < 3; ++i) {
    const auto q = std::span<const float>(r.spec_draft_probs).subspan(i * kVocab, kVocab);
    EXPECT_NEAR(std::accumulate(q.begin(), q.end(), 0.0), 1.0, 1e-5);
    EXPECT_GT(q[r.spec_token_ids[i]], 0.0f);
  }
}

struct FakePair {
  FakePair(int target_blocks, int draft_blocks, int block_size, LogitFn target_fn, LogitFn draft_fn,
           int n_vocab = kVocab)
      : target(n_vocab, target_blocks, block_size, std::move(target_fn)),
        draft(n_vocab, draft_blocks, block_size, std::move(draft_fn)) {}
  PagedFakeRunner target;
  PagedFakeRunner draft;
};

EngineConfig draft_config(FakePair& models, int target_blocks, int draft_blocks, int block_size, int budget, int k) {
  EngineConfig c;
  c.block_size = block_size;
  c.num_kv_blocks = target_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 8;
  c.speculative.method = SpeculativeMethod::kDraftModel;
  c.speculative.num_speculative_tokens = k;
  c.speculative.draft_runner = &models.draft;
  c.speculative.draft_num_kv_blocks = draft_blocks;
  return c;
}

std::map<std::string, Ids> run_to_completion(Engine& engine) {
  std::map<std::string, Ids> tokens;
  for (int guard = 0; engine.has_unfinished() && guard < 1000000; ++guard) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      tokens[o.request_id].insert(tokens[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
  }
  return tokens;
}

TEST(EngineDraftModelTest, GreedyOutputIsTheTargetsWhateverTheDraftAndTheMemory) {
  const LogitFn target_fn = hashed_model(1);
  struct Case {
    const char* name;
    bool same_model;  // draft == target: every draft must be accepted
    int target_blocks, budget;
  };
  const std::vector<Case> cases = {
      {"same model", true, 64, 64},
      {"same model, chunked prefill", true, 64, 7},
      {"same model, preemption", true, 14, 64},  // 14 x 4 slots for 4 sequences of up to 41 tokens
      {"other model", false, 64, 64},
      {"other model, preemption", false, 14, 64},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    FakePair models(c.target_blocks, 40, 4, target_fn, c.same_model ? target_fn : hashed_model(2));
    Engine engine(draft_config(models, c.target_blocks, 40, 4, c.budget, 3), models.target);
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(engine.add_request({"r" + std::to_string(i), prompt_of(5 + 3 * i, i), greedy(25)}).ok());
    }
    auto got = run_to_completion(engine);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(got["r" + std::to_string(i)], reference_greedy(target_fn, prompt_of(5 + 3 * i, i), 25)) << i;
    }
    const EngineStats s = engine.stats();
    EXPECT_GT(s.num_draft_tokens, 0);
    if (c.same_model) {
      EXPECT_EQ(s.num_accepted_tokens, s.num_draft_tokens);
    } else {
      EXPECT_LT(s.spec_acceptance_rate, 0.2);  // two unrelated hashes agree 1 time in 32
    }
    if (c.target_blocks == 14) {
      EXPECT_GT(s.num_preemptions, 0);
    }
    EXPECT_EQ(engine.kv_cache().pool().num_free_blocks(), c.target_blocks);
    EXPECT_EQ(engine.draft_proposer()->pool().num_free_blocks(), 40);
  }
}

// A draft that is the target except where a hash of its context says otherwise (1 time in
// 3). With exact draft KV bookkeeping a draft is accepted exactly when its true context is
// not one of those, so the counts are known in advance; a rejected draft left in the draft
// KV would change what the draft model reads after a rejection, and so the counts.
TEST(EngineDraftModelTest, NoisyDraftIsAcceptedExactlyWhereItAgreesWithTheTarget) {
  const LogitFn target_fn = hashed_model(1);
  auto noisy = [](std::span<const int32_t> context) {
    uint64_t h = 77;
    for (int32_t t : context) h = mix(h ^ static_cast<uint64_t>(t + 1));
    return h % 3 == 0;
  };
  const LogitFn draft_fn = [&](std::span<const int32_t> seq, float* logits) {
    target_fn(seq, logits);
    if (noisy(seq)) *std::max_element(logits, logits + kVocab) = -1.0f;  // another token wins
  };
  constexpr int kMaxTokens = 30, kSpec = 3, kRequests = 3;
  FakePair models(64, 64, 4, target_fn, draft_fn);
  Engine engine(draft_config(models, 64, 64, 4, 256, kSpec), models.target);
  std::map<std::string, Ids> expected;
  int64_t expected_drafts = 0, expected_accepted = 0;
  for (int i = 0; i < kRequests; ++i) {
    const std::string id = "r" + std::to_string(i);
    const Ids prompt = prompt_of(4 + i, 10 + i);
    ASSERT_TRUE(engine.add_request({id, prompt, greedy(kMaxTokens)}).ok());
    expected[id] = reference_greedy(target_fn, prompt, kMaxTokens);
    Ids full = prompt;
    full.insert(full.end(), expected[id].begin(), expected[id].end());
    // After the prefill's token, each step verifies k drafts (k cut to the tokens left) and
    // emits the accepted ones and one more.
    for (int num_out = 1; num_out < kMaxTokens;) {
      const int k = std::min(kSpec, kMaxTokens - num_out - 1);
      int num_accepted = 0;
      while (num_accepted < k &&
             !noisy(std::span<const int32_t>(full).first(prompt.size() + num_out + num_accepted))) {
        ++num_accepted;
      }
      expected_drafts += k;
      expected_accepted += num_accepted;
      num_out += num_accepted + 1;
    }
  }
  EXPECT_EQ(run_to_completion(engine), expected);
  EXPECT_EQ(engine.stats().num_draft_tokens, expected_drafts);
  EXPECT_EQ(engine.stats().num_accepted_tokens, expected_accepted);
  EXPECT_GT(expected_drafts - expected_accepted, 10);
  EXPECT_GT(expected_accepted, 10);
}

TEST(EngineDraftModelTest, DraftBlocksAreFreedOnFinishAndAbort) {
  FakePair models(32, 32, 4, hashed_model(1), hashed_model(1));
  Engine engine(draft_config(models, 32, 32, 4, 64, 3), models.target);
  const DraftModelProposer& draft = *engine.draft_proposer();
  ASSERT_TRUE(engine.add_request({"a", prompt_of(9, 1), greedy(100)}).ok());
  ASSERT_TRUE(engine.add_request({"b", prompt_of(3, 2), greedy(5)}).ok());
  ASSERT_TRUE(engine.step().ok());  // prefill, one token each, then 3 drafts each
  EXPECT_EQ(draft.num_cached_tokens("a"), 10 + 2);
  EXPECT_EQ(draft.num_cached_tokens("b"), 4 + 2);
  EXPECT_EQ(draft.pool().num_free_blocks(), 32 - 3 - 2);
  ASSERT_TRUE(engine.step().ok());  // all drafts accepted: b has its 5 tokens
  EXPECT_EQ(draft.num_cached_tokens("b"), 0);
  EXPECT_EQ(draft.num_cached_tokens("a"), 14 + 2);
  EXPECT_EQ(draft.pool().num_free_blocks(), 32 - 4);
  ASSERT_TRUE(engine.abort("a").ok());
  EXPECT_EQ(draft.num_cached_tokens("a"), 0);
  EXPECT_EQ(draft.pool().num_free_blocks(), 32);
}

TEST(EngineDraftModelTest, FailedDraftForwardCostsOnlyThatStepsDrafts) {
  const LogitFn fn = hashed_model(1);
  FakePair models(32, 32, 4, fn, fn);
  Engine engine(draft_config(models, 32, 32, 4, 64, 3), models.target);
  ASSERT_TRUE(engine.add_request({"a", prompt_of(7, 1), greedy(20)}).ok());
  Ids got;
  auto step = [&] {
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    ASSERT_EQ(outputs->size(), 1u);
    got.insert(got.end(), (*outputs)[0].token_ids.begin(), (*outputs)[0].token_ids.end());
  };
  step();                          // prefill: 1 token, then 3 drafts
  models.draft.fail_next_ = true;  // the proposal at the end of the next step fails
  step();                          // 3 drafts accepted and a bonus token
  EXPECT_EQ(got.size(), 5u);
  step();                          // no drafts to verify: one plain token
  EXPECT_EQ(got.size(), 6u);
  EXPECT_EQ(engine.stats().num_draft_tokens, 3);
  while (engine.has_unfinished()) step();
  EXPECT_EQ(got, reference_greedy(fn, prompt_of(7, 1), 20));
  EXPECT_EQ(engine.stats().num_accepted_tokens, engine.stats().num_draft_tokens);
  EXPECT_EQ(engine.draft_proposer()->pool().num_free_blocks(), 32);
}

TEST(EngineDraftModelTest, PreemptedRequestLosesItsDraftStateAndRecomputesIt) {
  // 6 blocks of 4 tokens cannot hold two sequences of 9 + 20 tokens.
  const LogitFn fn = hashed_model(1);
  FakePair models(6, 32, 4, fn, fn);
  Engine engine(draft_config(models, 6, 32, 4, 64, 3), models.target);
  const DraftModelProposer& draft = *engine.draft_proposer();
  ASSERT_TRUE(engine.add_request({"a", prompt_of(9, 1), greedy(12)}).ok());
  ASSERT_TRUE(engine.add_request({"b", prompt_of(9, 2), greedy(12)}).ok());
  std::map<std::string, Ids> got;
  bool saw_preemption = false;
  while (engine.has_unfinished()) {
    const int64_t preemptions = engine.stats().num_preemptions;
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    for (const RequestOutput& o : *outputs) {
      got[o.request_id].insert(got[o.request_id].end(), o.token_ids.begin(), o.token_ids.end());
    }
    if (engine.stats().num_preemptions > preemptions) {
      saw_preemption = true;
      EXPECT_EQ(draft.num_cached_tokens("b"), 0);  // the latest arrival is the victim
    }
  }
  EXPECT_TRUE(saw_preemption);
  EXPECT_EQ(got["a"], reference_greedy(fn, prompt_of(9, 1), 12));
  EXPECT_EQ(got["b"], reference_greedy(fn, prompt_of(9, 2), 12));
  EXPECT_EQ(engine.stats().num_accepted_tokens, engine.stats().num_draft_tokens);
  EXPECT_EQ(draft.pool().num_free_blocks(), 32);
}

// Sampling at temperature 1 with a draft whose q differs from the target's p, both known
// tables over 4 tokens conditioned on the last token. Whatever is accepted or rejected, the
// joint distribution of the first three tokens must be the target's (chi-square), and the
// acceptance rate must be the theoretical one: a draft of context c is accepted with
// probability alpha(c) = sum_x min(p(x|c), q(x|c)).
constexpr int kV = 4;
using Table = std::array<std::array<double, kV>, kV>;  // [last token][next token]
constexpr Table kP = {{{0.4, 0.3, 0.2, 0.1}, {0.1, 0.2, 0.3, 0.4}, {0.25, 0.25, 0.25, 0.25}, {0.5, 0.1, 0.1, 0.3}}};
constexpr Table kQ = {{{0.1, 0.2, 0.3, 0.4}, {0.25, 0.25, 0.25, 0.25}, {0.5, 0.1, 0.1, 0.3}, {0.4, 0.3, 0.2, 0.1}}};

LogitFn table_model(const Table& table) {
  return [&table](std::span<const int32_t> seq, float* logits) {
    for (int x = 0; x < kV; ++x) logits[x] = static_cast<float>(std::log(table[seq.back()][x]));
  };
}

double alpha(int c) {
  double a = 0;
  for (int x = 0; x < kV; ++x) a += std::min(kP[c][x], kQ[c][x]);
  return a;
}

struct SampledRun {
  std::vector<int> joint_counts;  // of (t1, t2, t3), t1 * 16 + t2 * 4 + t3
  EngineStats stats;
};

SampledRun run_sampled(int num_requests, int k, int max_tokens) {
  FakePair models(4096, 4096, 4, table_model(kP), table_model(kQ), kV);
  EngineConfig config = draft_config(models, 4096, 4096, 4, 4096, k);
  config.max_num_seqs = 256;
  config.seed = 7;
  Engine engine(config, models.target);
  SamplingParams p;
  p.max_tokens = max_tokens;
  for (int i = 0; i < num_requests; ++i) EXPECT_TRUE(engine.add_request({std::to_string(i), {3, 0}, p}).ok());
  SampledRun run{std::vector<int>(kV * kV * kV, 0), {}};
  for (const auto& [id, t] : run_to_completion(engine)) {
    EXPECT_EQ(t.size(), static_cast<size_t>(max_tokens));
    ++run.joint_counts[(t[0] * kV + t[1]) * kV + t[2]];
  }
  run.stats = engine.stats();
  EXPECT_EQ(engine.draft_proposer()->pool().num_free_blocks(), 4096);
  return run;
}

// Pearson's chi-square of the counts against the target's joint p(t1|0) p(t2|t1) p(t3|t2).
double chi_square(const SampledRun& run, int num_requests) {
  double chi2 = 0;
  for (int a = 0; a < kV; ++a)
    for (int b = 0; b < kV; ++b)
      for (int c = 0; c < kV; ++c) {
        const double e = kP[0][a] * kP[a][b] * kP[b][c] * num_requests;
        const int n = run.joint_counts[(a * kV + b) * kV + c];
        chi2 += (n - e) * (n - e) / e;
      }
  return chi2;
}

constexpr int kRequests = 20000;
constexpr double kChi2Df63P001 = 103.4;  // 63 degrees of freedom, p = 0.001
// The acceptance rate over ~20000 Bernoulli trials has a standard error under 0.004.
constexpr double kRateTolerance = 0.015;

TEST(EngineDraftModelTest, OneSampledDraftKeepsTheDistributionAndAcceptsAtTheTheoreticalRate) {
  // max_tokens 3: t1 comes from the prefill, t2 is the one verified draft (k is cut to the
  // room left), t3 the bonus token or a plain sample after a rejection.
  const SampledRun run = run_sampled(kRequests, 1, 3);
  EXPECT_LT(chi_square(run, kRequests), kChi2Df63P001);
  EXPECT_EQ(run.stats.num_draft_tokens, kRequests);
  double expected_rate = 0;
  for (int a = 0; a < kV; ++a) expected_rate += kP[0][a] * alpha(a);
  EXPECT_NEAR(run.stats.spec_acceptance_rate, expected_rate, kRateTolerance);
  std::printf("[ k = 1 ] acceptance %.4f, theory %.4f, chi-square %.1f\n", run.stats.spec_acceptance_rate,
              expected_rate, chi_square(run, kRequests));
}

TEST(EngineDraftModelTest, TwoSampledDraftsKeepTheDistributionAndAcceptAtTheTheoreticalRate) {
  // max_tokens 4: after t1, drafts d1, d2 from context t1 are verified for t2 and t3. If d1
  // is rejected (t2 drawn from the residual), one more draft is verified for t3.
  const SampledRun run = run_sampled(kRequests, 2, 4);
  EXPECT_LT(chi_square(run, kRequests), kChi2Df63P001);
  double verified = 0, accepted = 0;  // expected per request
  for (int a = 0; a < kV; ++a) {
    verified += kP[0][a] * (2 + (1 - alpha(a)));
    for (int x = 0; x < kV; ++x) {
      accepted += kP[0][a] * (std::min(kP[a][x], kQ[a][x]) * (1 + alpha(x)) +  // d1 = x accepted
                              std::max(0.0, kP[a][x] - kQ[a][x]) * alpha(x));   // d1 rejected, t2 = x
    }
  }
  EXPECT_NEAR(run.stats.spec_acceptance_rate, accepted / verified, kRateTolerance);
  std::printf("[ k = 2 ] acceptance %.4f, theory %.4f, chi-square %.1f\n", run.stats.spec_acceptance_rate,
              accepted / verified, chi_square(run, kRequests));
  EXPECT_NEAR(static_cast<double>(run.stats.num_draft_tokens) / kRequests, verified, 0.05);
}

}  // namespace
}  // namespace koi::engine
