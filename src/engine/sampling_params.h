// SamplingParams: how one request turns logits into tokens and when it stops. A plain value
// checked once by validate() when the request arrives; the engine never sees invalid ones.
// `n` (several completions per prompt) is handled above the engine as n requests.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::engine {

struct SamplingParams {
  float temperature = 1.0f;         // 0: greedy (argmax after penalties and bias)
  int top_k = 0;                    // keep the k most likely tokens (ties kept); 0: off
  float top_p = 1.0f;               // keep the smallest most-likely set with mass >= top_p
  float min_p = 0.0f;               // drop tokens with p < min_p * p_max
  float repetition_penalty = 1.0f;  // over prompt and output tokens: l>0 ? l/r : l*r
  float presence_penalty = 0.0f;    // over output tokens: l -= presence if seen
  float frequency_penalty = 0.0f;   // over output tokens: l -= frequency * count
  std::map<int32_t, float> logit_bias;  // token id -> added to its logit
  std::optional<uint64_t> seed;     // set: the request's samples depend on nothing else
  int max_tokens = 16;              // output tokens at most
  std::vector<std::string> stop;    // stop strings (need the engine's tokenizer), not in the output
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  int logprobs = -1;                // -1: none; k >= 0: the sampled token's logprob and top k
};

// Checks every field against its range and the vocabulary size; the message names the field
// and the accepted range.
Status validate(const SamplingParams& params, int n_vocab);

}  // namespace koi::engine
