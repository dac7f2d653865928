// Speculative decoding: proposing draft tokens and verifying them against the target
// model's logits so that the output distribution is exactly the one without speculation.
//
// A decoding request with drafts d1..dk schedules 1 + k tokens (its last token and the
// drafts) and gets 1 + k rows of logits from one batched forward pass. Row i gives the
// target distribution p_i for the token after d_i (row 0: after the last real token).
// The drafts here come from a deterministic proposer (a point mass q(d_i) = 1), so the
// standard rejection rule reduces to: accept d_i with probability p_i(d_i); on the first
// rejection draw from p_i with d_i removed (the residual max(0, p - q), normalized) and
// stop; if all k are accepted, draw a bonus token from p_k. Greedy requests (one-hot p)
// accept exactly the drafts equal to the argmax, so their output is identical with and
// without speculation. Plain sampling is the same function with no drafts.
// Free functions; thread-safe for distinct requests.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "engine/request.h"

namespace koi::engine {

struct SpeculativeConfig {
  int num_speculative_tokens = 0;  // k drafts per step; 0 disables speculation
  int prompt_lookup_min = 1;       // n-gram sizes tried, longest first
  int prompt_lookup_max = 4;
};

// Prompt lookup: finds the latest earlier occurrence of the sequence's last n tokens
// (n from max_n down to min_n) and proposes the up to k tokens that followed it.
std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int min_n, int max_n, int k);

// The tokens a request emits this step: `logits` holds 1 + request.spec_token_ids.size()
// rows of n_vocab. Returns the accepted drafts followed by one sampled token. Uses the
// request's Rng; does not change the request otherwise.
std::vector<SampledToken> sample_with_drafts(Request& request, std::span<const float> logits, int n_vocab);

}  // namespace koi::engine
