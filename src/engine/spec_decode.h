// Speculative decoding: proposing draft tokens and verifying them against the target
// model's logits so that the output distribution is exactly the one without speculation.
//
// A decoding request with drafts d1..dk schedules 1 + k tokens (its last token and the
// drafts) and gets 1 + k rows of logits from one batched forward pass. Row i gives the
// target distribution p_i for the token after d_i (row 0: after the last real token).
// Each draft d_i was drawn from a proposal distribution q_i: a point mass for the n-gram
// proposer and for greedy requests, the draft model's processed distribution otherwise
// (Request::spec_draft_probs). Verification is the rejection rule of Leviathan et al. and
// Chen et al. (2023): accept d_i with probability min(1, p_i(d_i) / q_i(d_i)); on the
// first rejection draw from the residual norm(max(0, p_i - q_i)) and stop; if all k are
// accepted, draw a bonus token from p_k. Each emitted token is then distributed exactly as
// p. With a point mass the rule reads: accept with probability p_i(d_i), else draw from p_i
// with d_i removed. Greedy requests (one-hot p) accept exactly the drafts equal to the
// argmax, so their output is identical with and without speculation. Plain sampling is the
// same function with no drafts. p_i is the request's processed distribution (penalties,
// temperature, top-k/p, min-p) with the accepted drafts counted as output. Drafts use the
// request's Rng too, and how many a request gets depends on the step's budget and the draft
// memory, so with speculation a seeded sampling request repeats its output only in the same
// batch (its distribution never changes).
// Free functions; thread-safe for distinct requests.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/model_runner.h"
#include "engine/request.h"

namespace koi::engine {

enum class SpeculativeMethod {
  kNgram,       // prompt lookup: copies what followed the latest match of the last tokens
  kDraftModel,  // a small model sharing the target's vocabulary (draft_model.h)
};

// "ngram" or "draft"; the message lists both otherwise.
Result<SpeculativeMethod> parse_speculative_method(std::string_view name);

struct SpeculativeConfig {
  SpeculativeMethod method = SpeculativeMethod::kNgram;
  int num_speculative_tokens = 0;  // k drafts per step; 0 disables speculation
  int prompt_lookup_min = 1;       // ngram: n-gram sizes tried, longest first
  int prompt_lookup_max = 4;
  // draft: the draft model, not owned (it must outlive the engine). Its KvCache holds
  // draft_num_kv_blocks blocks of EngineConfig::block_size tokens. A sequence of n tokens
  // with k drafts takes ceil((n + k - 1) / block_size) of them; a request that finds no
  // room gets no drafts that step.
  ModelRunner* draft_runner = nullptr;
  int draft_num_kv_blocks = 0;
};

// Checks the config against the target model; the message names the field and what to do.
// The engine's constructor requires it to pass.
Status validate(const SpeculativeConfig& config, const ModelRunner& target);

// Prompt lookup: finds the latest earlier occurrence of the sequence's last n tokens
// (n from max_n down to min_n) and proposes the up to k tokens that followed it.
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int min_n, int max_n, int k);

// The tokens a request emits this step: `logits` holds 1 + request.spec_token_ids.size()
// rows of n_vocab. Returns the accepted drafts followed by one sampled token. Uses the
// request's Rng; does not change the request otherwise. A constrained request (with a
// matcher) has every row masked to the tokens its grammar allows after the drafts before
// it, so a draft the grammar rejects has probability 0 and is rejected by the same rule;
// `budget` (tokens the request may still emit, <= 0: no limit) keeps the grammar's
// document completable within it (matcher.h).
std::vector<SampledToken> sample_with_drafts(Request& request, std::span<const float> logits, int n_vocab,
                                             int budget = 0);

}  // namespace koi::engine
