#include "engine/engine.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <regex>

#include "grammar/constraint.h"

namespace koi::engine {
namespace {

using Ids = std::vector<int32_t>;

uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// How the fake model's logits depend on the sequence.
enum class Dependence { kWholePrefix, kLastToken };

// Logits as a fixed function of the sequence so far: every output is checkable exactly.
void fake_logits(std::span<const int32_t> seq, Dependence dep, int n_vocab, float* out) {
  uint64_t h = 0;
  if (dep == Dependence::kWholePrefix) {
    for (int32_t t : seq) h = mix(h ^ static_cast<uint64_t>(t + 1));
  } else {
    h = mix(static_cast<uint64_t>(seq.back() + 1));
  }
  for (int v = 0; v < n_vocab; ++v) out[v] = static_cast<float>(mix(h ^ (0x9E37ull * (v + 1))) % 1000) / 1000.0f;
}

// A model that keeps token ids in a paged cache exactly as a real one keeps K and V: it
// writes each batch token to the slot its block table gives and computes logits from the
// sequence it reads back through the block table, so a wrong block table, a bad prefix hit
// or a missing recompute changes the output.
class FakeRunner final : public ModelRunner {
 public:
  FakeRunner(int n_vocab, int max_context, int num_blocks, int block_size, Dependence dep, FakeClock* clock = nullptr)
      : n_vocab_(n_vocab), max_context_(max_context), block_size_(block_size), dep_(dep), clock_(clock),
        cache_(static_cast<size_t>(num_blocks) * block_size, -1) {}

  int n_vocab() const override { return n_vocab_; }
  int max_context() const override { return max_context_; }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    if (fail_next_) {
      fail_next_ = false;
      return Status::unavailable("injected failure");
    }
    if (clock_) clock_->advance_ns(1'000'000);
    num_tokens_seen_ += batch.num_tokens();
    for (int64_t t = 0; t < batch.num_tokens(); ++t) {
      const auto& table = batch.sequences[batch.seq_index[t]].block_table;
      const int pos = batch.positions[t];
      if (pos / block_size_ >= static_cast<int>(table.size())) return Status::internal("block table too short");
      cache_[slot(table, pos)] = batch.token_ids[t];
    }
    for (size_t row = 0; row < batch.logit_indices.size(); ++row) {
      const int32_t t = batch.logit_indices[row];
      const auto& table = batch.sequences[batch.seq_index[t]].block_table;
      Ids seq;
      for (int pos = 0; pos <= batch.positions[t]; ++pos) seq.push_back(cache_[slot(table, pos)]);
      fake_logits(seq, dep_, n_vocab_, logits + row * n_vocab_);
    }
    return ok_status();
  }

  int64_t num_tokens_seen_ = 0;
  bool fail_next_ = false;

 private:
  size_t slot(std::span<const int32_t> table, int pos) const {
    return static_cast<size_t>(table[pos / block_size_]) * block_size_ + pos % block_size_;
  }
  int n_vocab_, max_context_, block_size_;
  Dependence dep_;
  FakeClock* clock_;
  Ids cache_;
};

Ids reference_greedy(Ids seq, int n, Dependence dep, int n_vocab) {
  std::vector<float> logits(static_cast<size_t>(n_vocab));
  Ids out;
  for (int i = 0; i < n; ++i) {
    fake_logits(seq, dep, n_vocab, logits.data());
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(next);
    seq.push_back(next);
  }
  return out;
}

Ids prompt_of(int len, int32_t salt, int n_vocab) {
  Ids p;
  for (int i = 0; i < len; ++i) p.push_back(static_cast<int32_t>(mix(static_cast<uint64_t>(salt * 7919 + i)) % n_vocab));
  return p;
}

SamplingParams greedy(int max_tokens) {
  SamplingParams p;
  p.temperature = 0.0f;
  p.max_tokens = max_tokens;
  return p;
}

// Runs the engine until every request finished; returns all tokens per request id.
std::map<std::string, Ids> run_to_completion(Engine& engine, std::map<std::string, FinishReason>* reasons = nullptr) {
  std::map<std::string, Ids> tokens;
  for (int guard = 0; engine.has_unfinished() && guard < 100000; ++guard) {
    auto outputs = engine.step();
    EXPECT_TRUE(outputs.ok()) << outputs.status().to_string();
    if (!outputs.ok()) break;
    for (const RequestOutput& o : *outputs) {
      Ids& t = tokens[o.request_id];
      t.insert(t.end(), o.token_ids.begin(), o.token_ids.end());
      if (o.finished && reasons) (*reasons)[o.request_id] = o.finish_reason;
    }
  }
  return tokens;
}

EngineConfig small_config(int num_blocks, int block_size, int budget) {
  EngineConfig c;
  c.block_size = block_size;
  c.num_kv_blocks = num_blocks;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = 8;
  return c;
}

constexpr int kVocab = 32;

TEST(EngineTest, GreedyMatchesReferenceAloneAndInAnyBatch) {
  const std::vector<int> prompt_lens = {1, 5, 17, 40, 70};
  FakeRunner runner(kVocab, 512, 64, 4, Dependence::kWholePrefix);
  Engine engine(small_config(64, 4, 16), runner);  // 16-token budget: long prompts are chunked
  for (size_t i = 0; i < prompt_lens.size(); ++i) {
    ASSERT_TRUE(engine.add_request({"r" + std::to_string(i), prompt_of(prompt_lens[i], i, kVocab), greedy(20)}).ok());
  }
  auto got = run_to_completion(engine);
  for (size_t i = 0; i < prompt_lens.size(); ++i) {
    EXPECT_EQ(got["r" + std::to_string(i)],
              reference_greedy(prompt_of(prompt_lens[i], i, kVocab), 20, Dependence::kWholePrefix, kVocab))
        << "request " << i;
  }
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
}

TEST(EngineTest, PreemptedRequestsProduceTheSameTokens) {
  // 12 blocks of 4 tokens cannot hold four 10 + 20 token sequences at once.
  FakeRunner runner(kVocab, 512, 12, 4, Dependence::kWholePrefix);
  Engine engine(small_config(12, 4, 64), runner);
  for (int i = 0; i < 4; ++i) {
    ASSERT_TRUE(engine.add_request({"r" + std::to_string(i), prompt_of(10, i, kVocab), greedy(20)}).ok());
  }
  auto got = run_to_completion(engine);
  EXPECT_GT(engine.stats().num_preemptions, 0);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(got["r" + std::to_string(i)], reference_greedy(prompt_of(10, i, kVocab), 20, Dependence::kWholePrefix, kVocab));
  }
  EXPECT_EQ(engine.kv_cache().pool().num_free_blocks(), 12);
}

TEST(EngineTest, SharedThousandTokenPrefixIsComputedOnce) {
  constexpr int kBlocks = 200;
  FakeRunner runner(kVocab, 4096, kBlocks, 16, Dependence::kWholePrefix);
  Engine engine(small_config(kBlocks, 16, 2048), runner);
  const Ids prefix = prompt_of(1000, 99, kVocab);
  Ids prompt_a = prefix, prompt_b = prefix;
  prompt_a.insert(prompt_a.end(), {1, 2, 3});
  prompt_b.insert(prompt_b.end(), {4, 5, 6, 7, 8});

  ASSERT_TRUE(engine.add_request({"a", prompt_a, greedy(4)}).ok());
  run_to_completion(engine);
  const int64_t seen_after_a = runner.num_tokens_seen_;
  ASSERT_TRUE(engine.add_request({"b", prompt_b, greedy(4)}).ok());
  auto got = run_to_completion(engine);

  // 62 full blocks (992 tokens) are hits; b computes 13 prompt tokens and 3 decode tokens.
  EXPECT_EQ(engine.stats().prefix_cache_hit_tokens, 992);
  EXPECT_EQ(engine.stats().prefix_cache_queried_tokens, 1003 + 1005);
  EXPECT_EQ(runner.num_tokens_seen_ - seen_after_a, 13 + 3);
  EXPECT_EQ(got["b"], reference_greedy(prompt_b, 4, Dependence::kWholePrefix, kVocab));
}

TEST(EngineTest, GreedySpeculationChangesNothingButTheStepCount) {
  for (Dependence dep : {Dependence::kWholePrefix, Dependence::kLastToken}) {
    std::map<std::string, Ids> outputs[2];
    EngineStats stats[2];
    for (int k : {0, 3}) {
      FakeRunner runner(kVocab, 512, 64, 4, dep);
      EngineConfig config = small_config(64, 4, 64);
      config.speculative.num_speculative_tokens = k;
      Engine engine(config, runner);
      for (int i = 0; i < 4; ++i) {
        ASSERT_TRUE(engine.add_request({"r" + std::to_string(i), prompt_of(12, i, kVocab), greedy(40)}).ok());
      }
      outputs[k > 0] = run_to_completion(engine);
      stats[k > 0] = engine.stats();
    }
    EXPECT_EQ(outputs[0], outputs[1]);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(outputs[1]["r" + std::to_string(i)], reference_greedy(prompt_of(12, i, kVocab), 40, dep, kVocab));
    }
    EXPECT_EQ(stats[0].num_draft_tokens, 0);
    EXPECT_GT(stats[1].num_draft_tokens, 0);
    if (dep == Dependence::kLastToken) {  // output cycles, so prompt lookup predicts it
      EXPECT_GT(stats[1].spec_acceptance_rate, 0.5);
      EXPECT_LT(stats[1].num_steps, stats[0].num_steps);
    }
  }
}

// With temperature 1 and drafts on every step, the joint distribution of the first three
// tokens must still be the model's: chi-square against the exact probabilities.
TEST(EngineTest, SpeculativeSamplingKeepsTheDistribution) {
  constexpr int kV = 4, kRequests = 20000, kSpec = 2;
  const Ids prompt = {0, 1, 2, 3, 0, 1, 2, 3, 1};
  auto probs_after = [&](int32_t last) {
    std::vector<float> l(kV);
    fake_logits(Ids{last}, Dependence::kLastToken, kV, l.data());
    std::vector<double> p(kV);
    double z = 0;
    for (int v = 0; v < kV; ++v) z += p[v] = std::exp(l[v]);
    for (double& x : p) x /= z;
    return p;
  };
  std::vector<double> expected(kV * kV * kV);
  for (int a = 0; a < kV; ++a)
    for (int b = 0; b < kV; ++b)
      for (int c = 0; c < kV; ++c) {
        expected[(a * kV + b) * kV + c] = probs_after(prompt.back())[a] * probs_after(a)[b] * probs_after(b)[c];
      }

  FakeRunner runner(kV, 64, 4096, 4, Dependence::kLastToken);
  EngineConfig config = small_config(4096, 4, 4096);
  config.max_num_seqs = 256;
  config.speculative.num_speculative_tokens = kSpec;
  config.seed = 2024;
  Engine engine(config, runner);
  SamplingParams p;
  p.max_tokens = 3;
  for (int i = 0; i < kRequests; ++i) ASSERT_TRUE(engine.add_request({std::to_string(i), prompt, p}).ok());
  auto got = run_to_completion(engine);
  std::vector<int> counts(expected.size(), 0);
  for (const auto& [id, t] : got) {
    ASSERT_EQ(t.size(), 3u);
    ++counts[(t[0] * kV + t[1]) * kV + t[2]];
  }
  double chi2 = 0;
  for (size_t cell = 0; cell < expected.size(); ++cell) {
    const double e = expected[cell] * kRequests;
    chi2 += (counts[cell] - e) * (counts[cell] - e) / e;
  }
  EXPECT_LT(chi2, 103.4);  // 63 degrees of freedom, p = 0.001
  EXPECT_GT(engine.stats().num_accepted_tokens, 0);
  EXPECT_GT(engine.stats().num_draft_tokens, engine.stats().num_accepted_tokens);
}

TEST(EngineTest, SeededRequestIsReproducibleInAnyBatch) {
  SamplingParams seeded;
  seeded.seed = 42;
  seeded.max_tokens = 30;
  auto run = [&](int others, uint64_t engine_seed) {
    FakeRunner runner(kVocab, 512, 64, 4, Dependence::kWholePrefix);
    EngineConfig config = small_config(64, 4, 64);
    config.seed = engine_seed;
    Engine engine(config, runner);
    for (int i = 0; i < others; ++i) {
      SamplingParams p;
      p.max_tokens = 10;
      EXPECT_TRUE(engine.add_request({"other" + std::to_string(i), prompt_of(5, i, kVocab), p}).ok());
    }
    EXPECT_TRUE(engine.add_request({"seeded", prompt_of(6, 77, kVocab), seeded}).ok());
    return run_to_completion(engine)["seeded"];
  };
  const Ids alone = run(0, 1);
  EXPECT_EQ(alone.size(), 30u);
  EXPECT_EQ(run(3, 2), alone);
  EXPECT_EQ(run(5, 3), alone);
  seeded.seed = 43;
  EXPECT_NE(run(0, 1), alone);
}

TEST(EngineTest, AbortMidGenerationFreesAllBlocks) {
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix);
  Engine engine(small_config(32, 4, 64), runner);
  ASSERT_TRUE(engine.add_request({"a", prompt_of(9, 1, kVocab), greedy(100)}).ok());
  ASSERT_TRUE(engine.add_request({"b", prompt_of(3, 2, kVocab), greedy(100)}).ok());
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(engine.step().ok());
  EXPECT_EQ(engine.stats().num_running, 2);
  EXPECT_GT(engine.stats().kv_usage, 0.0);
  ASSERT_TRUE(engine.abort("a").ok());
  ASSERT_TRUE(engine.abort("b").ok());
  EXPECT_EQ(engine.kv_cache().pool().num_free_blocks(), 32);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
  auto outputs = engine.step();
  ASSERT_TRUE(outputs.ok());
  ASSERT_EQ(outputs->size(), 2u);
  EXPECT_EQ((*outputs)[0].finish_reason, FinishReason::kAbort);
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.abort("a").code(), StatusCode::kNotFound);
}

// With the batch full (one running request at most), waiting requests run in priority
// order, lower values first, whatever their arrival order; equal priorities by arrival.
TEST(EngineTest, LowerPriorityValueRunsFirstWhenTheBatchIsFull) {
  FakeRunner runner(kVocab, 512, 64, 4, Dependence::kWholePrefix);
  EngineConfig config = small_config(64, 4, 64);
  config.max_num_seqs = 1;
  Engine engine(config, runner);
  ASSERT_TRUE(engine.add_request({"running", prompt_of(3, 1, kVocab), greedy(3)}).ok());
  ASSERT_TRUE(engine.step().ok());  // "running" takes the only slot
  int salt = 2;
  for (auto [id, priority] : {std::pair{"background", 5}, {"default", 0}, {"urgent", -3}, {"default-later", 0}}) {
    RequestSpec spec{id, prompt_of(3, salt++, kVocab), greedy(3)};
    spec.priority = priority;
    ASSERT_TRUE(engine.add_request(std::move(spec)).ok());
  }
  EXPECT_EQ(engine.stats().num_running, 1);
  EXPECT_EQ(engine.stats().num_waiting, 4);
  std::vector<std::string> first_output;  // request ids in the order of their first token
  for (int guard = 0; engine.has_unfinished() && guard < 100; ++guard) {
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    for (const RequestOutput& o : *outputs) {
      if (std::find(first_output.begin(), first_output.end(), o.request_id) == first_output.end()) {
        first_output.push_back(o.request_id);
      }
    }
  }
  EXPECT_EQ(first_output, (std::vector<std::string>{"running", "urgent", "default", "default-later", "background"}));
}

TEST(EngineTest, RejectsBadRequestsWithClearMessages) {
  FakeRunner runner(kVocab, 64, 8, 4, Dependence::kWholePrefix);
  Engine engine(small_config(8, 4, 64), runner);
  EXPECT_EQ(engine.max_model_len(), 32);  // the KV pool (8 x 4) is smaller than the context
  EXPECT_EQ(engine.add_request({"x", {1, 40, 2}, greedy(5)}).message(),
            "request 'x': prompt token 40 is outside the vocabulary [0, 32); tokenize with the model's tokenizer");
  SamplingParams bad;
  bad.temperature = -1.0f;
  EXPECT_EQ(engine.add_request({"y", {1}, bad}).message(), "request 'y': temperature is -1; it must be >= 0");
  EXPECT_EQ(engine.add_request({"z", prompt_of(32, 1, kVocab), greedy(5)}).code(), StatusCode::kInvalidArgument);
  EXPECT_FALSE(engine.has_unfinished());
}

TEST(EngineTest, FailedForwardChangesNothingAndCanBeRetried) {
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix);
  Engine engine(small_config(32, 4, 64), runner);
  ASSERT_TRUE(engine.add_request({"a", prompt_of(9, 1, kVocab), greedy(8)}).ok());
  ASSERT_TRUE(engine.step().ok());
  runner.fail_next_ = true;
  auto failed = engine.step();
  ASSERT_FALSE(failed.ok());
  EXPECT_EQ(failed.status().message(), "injected failure");
  auto got = run_to_completion(engine);
  EXPECT_EQ(got["a"].size(), 7u);
  EXPECT_EQ(engine.stats().num_generated_tokens, 8);
}

TEST(EngineTest, StatsCountTokensAndThroughput) {
  FakeClock clock;
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix, &clock);
  Engine engine(small_config(32, 4, 64), runner, clock);
  ASSERT_TRUE(engine.add_request({"a", prompt_of(6, 1, kVocab), greedy(5)}).ok());
  ASSERT_TRUE(engine.add_request({"b", prompt_of(4, 2, kVocab), greedy(5)}).ok());
  run_to_completion(engine);
  const EngineStats s = engine.stats();
  EXPECT_EQ(s.num_steps, 5);                        // 1 prefill step + 4 decode steps
  EXPECT_EQ(s.num_computed_tokens, 10 + 4 * 2);
  EXPECT_EQ(s.num_generated_tokens, 10);
  EXPECT_DOUBLE_EQ(s.busy_seconds, 0.005);           // 1 ms per forward on the fake clock
  EXPECT_DOUBLE_EQ(s.generated_tokens_per_second, 2000.0);
  EXPECT_EQ(s.num_running, 0);
  EXPECT_EQ(s.num_waiting, 0);
}

// A tokenizer whose token i reads as the letter 'a' + i % 26.
tokenizer::Tokenizer letter_tokenizer(int n_vocab) {
  tokenizer::TokenizerSpec spec;
  for (int i = 0; i < n_vocab; ++i) spec.tokens.push_back(std::string(1, static_cast<char>('a' + i % 26)));
  spec.scores.assign(spec.tokens.size(), 0.0f);
  auto tok = tokenizer::Tokenizer::create(spec);
  EXPECT_TRUE(tok.ok()) << tok.status().to_string();
  return *tok;
}

TEST(EngineTest, DetokenizerStopStringEndsRequest) {
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix);
  const tokenizer::Tokenizer tok = letter_tokenizer(kVocab);
  EngineConfig config = small_config(32, 4, 64);
  config.tokenizer = &tok;
  Engine engine(config, runner);
  const Ids prompt = prompt_of(5, 3, kVocab);
  const Ids expected = reference_greedy(prompt, 20, Dependence::kWholePrefix, kVocab);
  // Stop at the two letters of expected tokens 5 and 6: the text is the first 5 letters.
  const std::string stop = {static_cast<char>('a' + expected[5] % 26), static_cast<char>('a' + expected[6] % 26)};
  SamplingParams p = greedy(20);
  p.stop = {stop};
  ASSERT_TRUE(engine.add_request({"a", prompt, p}).ok());
  std::string text;
  FinishReason reason = FinishReason::kNone;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    for (const auto& o : *outputs) {
      text += o.text;
      if (o.finished) reason = o.finish_reason;
    }
  }
  std::string want;
  for (int i = 0; i < 7; ++i) want += static_cast<char>('a' + expected[i] % 26);
  EXPECT_EQ(reason, FinishReason::kStop);
  EXPECT_EQ(text, want.substr(0, want.find(stop)));
}

// Byte tokens that never complete a character come out as U+FFFD, the last one (held back
// in case the next token completed it) when the request ends at its length limit.
TEST(EngineTest, IncompleteCharacterAtTheLengthLimitComesOutAsReplacementCharacter) {
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix);
  tokenizer::TokenizerSpec spec;
  for (int i = 0; i < kVocab; ++i) spec.tokens.push_back(std::string(1, static_cast<char>('a' + i % 26)));
  spec.scores.assign(spec.tokens.size(), 0.0f);
  spec.types.assign(spec.tokens.size(), tokenizer::TokenType::kNormal);
  spec.tokens[7] = "<0xC3>";  // the first byte of a two-byte character
  spec.types[7] = tokenizer::TokenType::kByte;
  auto tok = tokenizer::Tokenizer::create(spec);
  ASSERT_TRUE(tok.ok()) << tok.status().to_string();
  EngineConfig config = small_config(32, 4, 64);
  config.tokenizer = &*tok;
  Engine engine(config, runner);
  SamplingParams p = greedy(3);
  p.logit_bias = {{7, 100.0f}};  // every output token is the lone lead byte
  ASSERT_TRUE(engine.add_request({"a", prompt_of(5, 3, kVocab), p}).ok());
  std::string text;
  FinishReason reason = FinishReason::kNone;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    for (const auto& o : *outputs) {
      text += o.text;
      if (o.finished) reason = o.finish_reason;
    }
  }
  EXPECT_EQ(reason, FinishReason::kLength);
  EXPECT_EQ(text, "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
}

// Structured output: every request's text is a document of its grammar, sampled or
// greedy, with or without speculation, even when max_tokens is tight; greedy output is the
// same with drafts (which the grammar checks) as without.
TEST(EngineTest, ConstrainedOutputMatchesItsGrammarWithSamplingAndSpeculation) {
  const tokenizer::Tokenizer tok = letter_tokenizer(kVocab);
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(tok, {}));
  auto g = cache.get({grammar::ConstraintKind::kRegex, "(ab|cd)+z", {}});
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const std::regex reference("(ab|cd)+z");
  std::map<std::string, std::string> greedy_text[2];
  for (int k : {0, 3}) {
    FakeRunner runner(kVocab, 512, 256, 4, Dependence::kLastToken);
    EngineConfig config = small_config(256, 4, 256);
    config.tokenizer = &tok;
    config.max_num_seqs = 32;
    config.speculative.num_speculative_tokens = k;
    Engine engine(config, runner);
    for (int i = 0; i < 24; ++i) {
      SamplingParams p = greedy(5 + i % 8);  // as few as 5 tokens: "abcdz" or shorter
      if (i % 2) {
        p.temperature = 1.0f;
        p.seed = static_cast<uint64_t>(i);
      }
      RequestSpec spec{"r" + std::to_string(i), prompt_of(6, i, kVocab), p};
      spec.grammar = *g;
      ASSERT_TRUE(engine.add_request(std::move(spec)).ok());
    }
    std::map<std::string, std::string> text;
    std::map<std::string, FinishReason> reasons;
    while (engine.has_unfinished()) {
      auto outputs = engine.step();
      ASSERT_TRUE(outputs.ok());
      for (const auto& o : *outputs) {
        text[o.request_id] += o.text;
        if (o.finished) reasons[o.request_id] = o.finish_reason;
      }
    }
    for (int i = 0; i < 24; ++i) {
      const std::string id = "r" + std::to_string(i);
      EXPECT_TRUE(std::regex_match(text[id], reference)) << id << ": " << text[id];
      EXPECT_EQ(reasons[id], FinishReason::kStop) << id;  // ended by the grammar, at 'z'
      if (i % 2 == 0) {
        greedy_text[k > 0][id] = text[id];
      }
    }
    if (k > 0) {
      EXPECT_GT(engine.stats().num_draft_tokens, 0);
    }
  }
  EXPECT_EQ(greedy_text[0], greedy_text[1]);
}

// A stop string cuts a constrained request's text like any other: the text before it.
TEST(EngineTest, StopStringsCutConstrainedOutput) {
  const tokenizer::Tokenizer tok = letter_tokenizer(kVocab);
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(tok, {}));
  FakeRunner runner(kVocab, 512, 256, 4, Dependence::kLastToken);
  EngineConfig config = small_config(256, 4, 256);
  config.tokenizer = &tok;
  Engine engine(config, runner);
  int stopped = 0;
  for (int i = 0; i < 16; ++i) {
    SamplingParams p = greedy(30);
    p.temperature = 1.0f;
    p.seed = static_cast<uint64_t>(i);
    p.stop = {"cd"};
    RequestSpec spec{"r" + std::to_string(i), prompt_of(6, i, kVocab), p};
    spec.grammar = cache.get({grammar::ConstraintKind::kRegex, "(ab|cd)+z", {}}).value();
    ASSERT_TRUE(engine.add_request(std::move(spec)).ok());
  }
  std::map<std::string, std::string> text;
  while (engine.has_unfinished()) {
    auto outputs = engine.step();
    ASSERT_TRUE(outputs.ok());
    for (const auto& o : *outputs) text[o.request_id] += o.text;
  }
  for (const auto& [id, t] : text) {
    const bool complete = std::regex_match(t, std::regex("(ab)+z"));
    EXPECT_TRUE(complete || std::regex_match(t, std::regex("(ab)*"))) << id << ": " << t;
    stopped += !complete;
  }
  EXPECT_GT(stopped, 0);
}

TEST(EngineTest, GrammarForAnotherVocabularyIsRejected) {
  FakeRunner runner(kVocab, 512, 32, 4, Dependence::kWholePrefix);
  Engine engine(small_config(32, 4, 64), runner);
  const tokenizer::Tokenizer tok = letter_tokenizer(kVocab + 1);
  grammar::GrammarCache cache(grammar::Vocabulary::from_tokenizer(tok, {}));
  RequestSpec spec{"a", prompt_of(5, 3, kVocab), greedy(4)};
  spec.grammar = cache.get({grammar::ConstraintKind::kRegex, "a+", {}}).value();
  EXPECT_EQ(engine.add_request(std::move(spec)).message(),
            "request 'a': its grammar was compiled for a vocabulary of 33 tokens, but the model has 32");
}

}  // namespace
}  // namespace koi::engine
