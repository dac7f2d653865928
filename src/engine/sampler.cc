#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace koi::engine {

namespace {

// Applies logit bias and the three penalties to `l` in place.
void apply_penalties(const SamplingParams& p, std::span<const int32_t> prompt, std::span<const int32_t> output,
                     std::vector<float>& l) {
  for (const auto& [token, bias] : p.logit_bias) l[token] += bias;
  if (p.repetition_penalty != 1.0f) {
    std::vector<char> seen(l.size(), 0);
    for (int32_t t : prompt) seen[t] = 1;
    for (int32_t t : output) seen[t] = 1;
    for (size_t t = 0; t < l.size(); ++t) {
      if (seen[t]) l[t] = l[t] > 0.0f ? l[t] / p.repetition_penalty : l[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::vector<int32_t> sorted(output.begin(), output.end());
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 0; i < sorted.size();) {
      size_t j = i;
      while (j < sorted.size() && sorted[j] == sorted[i]) ++j;
      l[sorted[i]] -= p.presence_penalty + p.frequency_penalty * static_cast<float>(j - i);
      i = j;
    }
  }
}

// Lowest id among the largest values.
int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

// Token ids with nonzero probability, most likely first (ties: lower id first).
std::vector<int32_t> kept_by_prob(const std::vector<float>& probs) {
  std::vector<int32_t> ids;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] > 0.0f) ids.push_back(static_cast<int32_t>(t));
  }
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return probs[a] > probs[b]; });
  return ids;
}

}  // namespace

void sampling_probs(const SamplingParams& p, std::span<const float> logits, std::span<const int32_t> prompt,
                    std::span<const int32_t> output, std::vector<float>* probs) {
  std::vector<float> l(logits.begin(), logits.end());
  apply_penalties(p, prompt, output, l);
  probs->assign(l.size(), 0.0f);
  if (p.temperature == 0.0f) {
    (*probs)[argmax(l)] = 1.0f;
    return;
  }
  const float max_logit = l[argmax(l)];
  double total = 0.0;
  for (size_t t = 0; t < l.size(); ++t) {
    (*probs)[t] = std::exp((l[t] - max_logit) / p.temperature);
    total += (*probs)[t];
  }
  for (float& x : *probs) x = static_cast<float>(x / total);
  if (p.min_p > 0.0f) {
    const float threshold = p.min_p * *std::max_element(probs->begin(), probs->end());
    for (float& x : *probs) {
      if (x < threshold) x = 0.0f;
    }
  }
  const bool top_k_on = p.top_k > 0 && static_cast<size_t>(p.top_k) < l.size();
  if (top_k_on || p.top_p < 1.0f) {
    const std::vector<int32_t> order = kept_by_prob(*probs);
    size_t keep = order.size();
    if (top_k_on && static_cast<size_t>(p.top_k) < keep) {
      const float kth = (*probs)[order[p.top_k - 1]];
      keep = static_cast<size_t>(p.top_k);
      while (keep < order.size() && (*probs)[order[keep]] == kth) ++keep;  // ties with the k-th stay
    }
    if (p.top_p < 1.0f) {
      double mass = 0.0;
      for (size_t i = 0; i < keep; ++i) mass += (*probs)[order[i]];
      double cumulative = 0.0;
      size_t nucleus = 0;
      while (nucleus < keep && cumulative < p.top_p * mass) cumulative += (*probs)[order[nucleus++]];
      keep = std::max<size_t>(nucleus, 1);
    }
    for (size_t i = keep; i < order.size(); ++i) (*probs)[order[i]] = 0.0f;
  }
  total = std::accumulate(probs->begin(), probs->end(), 0.0);
  for (float& x : *probs) x = static_cast<float>(x / total);
}

int32_t draw(std::span<const float> probs, Rng& rng) {
  const double total = std::accumulate(probs.begin(), probs.end(), 0.0);
  const double target = rng.uniform() * total;
  double cumulative = 0.0;
  int32_t last_nonzero = 0;
  for (size_t t = 0; t < probs.size(); ++t) {
    if (probs[t] <= 0.0f) continue;
    cumulative += probs[t];
    last_nonzero = static_cast<int32_t>(t);
    if (target < cumulative) return last_nonzero;
  }
  return last_nonzero;  // rounding left target just above the sum
}

SampledToken with_logprobs(const SamplingParams& p, int32_t token, std::span<const float> logits) {
  SampledToken out;
  out.token = token;
  if (p.logprobs < 0) return out;
  const float max_logit = logits[argmax(logits)];
  double total = 0.0;
  for (float x : logits) total += std::exp(static_cast<double>(x - max_logit));
  const double log_z = max_logit + std::log(total);
  auto logprob = [&](int32_t t) { return static_cast<float>(logits[t] - log_z); };
  out.logprob = logprob(token);
  std::vector<int32_t> ids(logits.size());
  std::iota(ids.begin(), ids.end(), 0);
  const size_t k = std::min(static_cast<size_t>(p.logprobs), ids.size());
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  for (size_t i = 0; i < k; ++i) out.top_logprobs.push_back({ids[i], logprob(ids[i])});
  return out;
}

SampledToken sample(const SamplingParams& p, Rng& rng, std::span<const float> logits,
                    std::span<const int32_t> prompt, std::span<const int32_t> output) {
  std::vector<float> probs;
  sampling_probs(p, logits, prompt, output, &probs);
  const int32_t token = p.temperature == 0.0f ? argmax(probs) : draw(probs, rng);
  return with_logprobs(p, token, logits);
}

}  // namespace koi::engine
