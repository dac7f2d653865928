#include "engine/spec_decode.h"

#include <algorithm>

namespace koi::engine {

std::vector<int32_t> propose_ngram(std::span<const int32_t> tokens, int min_n, int max_n, int k) {
  const int len = static_cast<int>(tokens.size());
  for (int n = std::min(max_n, len - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    // Latest match that ends before the suffix itself.
    for (int start = len - n - 1; start >= 0; --start) {
      if (std::equal(suffix.begin(), suffix.end(), tokens.begin() + start)) {
        const int from = start + n;
        const int count = std::min(k, len - from);
        return std::vector<int32_t>(tokens.begin() + from, tokens.begin() + from + count);
      }
    }
  }
  return {};
}

std::vector<SampledToken> sample_with_drafts(Request& r, std::span<const float> logits, int n_vocab) {
  const SamplingParams& params = r.params;
  const bool greedy = params.temperature == 0.0f;
  std::vector<int32_t> history(r.output().begin(), r.output().end());  // outputs, then accepted drafts
  std::vector<SampledToken> out;
  std::vector<float> probs;
  auto pick = [&] {
    return greedy ? static_cast<int32_t>(std::max_element(probs.begin(), probs.end()) - probs.begin())
                  : draw(probs, r.rng);
  };
  for (size_t row = 0;; ++row) {
    const auto row_logits = logits.subspan(row * static_cast<size_t>(n_vocab), static_cast<size_t>(n_vocab));
    sampling_probs(params, row_logits, r.prompt(), history, &probs);
    if (row == r.spec_token_ids.size()) {  // bonus token, or plain sampling without drafts
      out.push_back(with_logprobs(params, pick(), row_logits));
      return out;
    }
    const int32_t draft = r.spec_token_ids[row];
    const bool accepted = greedy ? probs[draft] == 1.0f : r.rng.uniform() < probs[draft];
    if (!accepted) {
      probs[draft] = 0.0f;  // the residual distribution
      out.push_back(with_logprobs(params, pick(), row_logits));
      return out;
    }
    out.push_back(with_logprobs(params, draft, row_logits));
    history.push_back(draft);
  }
}

}  // namespace koi::engine
