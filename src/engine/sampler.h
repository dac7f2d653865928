// Sampling: turns one row of logits into a token under a request's SamplingParams.
//
// The order follows vLLM v1: logit bias, repetition / frequency / presence penalties, then
// greedy argmax if temperature is 0; otherwise temperature, min-p, top-k, top-p, and a draw
// from what is left by inverse CDF with the request's own Rng, so a seeded request
// reproduces exactly whatever else is in the batch. Logprobs reported to the client are
// log-softmax of the raw logits (vLLM's default), not of the processed distribution.
// Free functions over plain values; thread-safe as long as each Rng has one user.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/random.h"
#include "engine/sampling_params.h"

namespace koi::engine {

struct TokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  bool operator==(const TokenLogprob&) const = default;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                     // set when params.logprobs >= 0
  std::vector<TokenLogprob> top_logprobs;   // params.logprobs entries, most likely first
};

// The distribution sampling draws from, over the whole vocabulary (zeros for filtered
// tokens; sums to 1). Greedy requests get a one-hot vector on the argmax.
// `prompt` feeds the repetition penalty only; `output` feeds all three penalties.
void sampling_probs(const SamplingParams& params, std::span<const float> logits, std::span<const int32_t> prompt,
                    std::span<const int32_t> output, std::vector<float>* probs);

// Draws a token from `probs` (not necessarily normalized) with one rng.uniform().
int32_t draw(std::span<const float> probs, Rng& rng);

// Fills logprob and top_logprobs of `token` from the raw logits, if params asks for them.
SampledToken with_logprobs(const SamplingParams& params, int32_t token, std::span<const float> logits);

// sampling_probs, then draw (no Rng use when greedy), then with_logprobs.
SampledToken sample(const SamplingParams& params, Rng& rng, std::span<const float> logits,
                    std::span<const int32_t> prompt, std::span<const int32_t> output);

}  // namespace koi::engine
