#include "engine/sampling_params.h"

#include <fmt/format.h>

namespace koi::engine {

namespace {
constexpr int kMaxLogprobs = 20;
}

Status validate(const SamplingParams& p, int n_vocab) {
  auto bad = [](std::string m) { return Status::invalid_argument(std::move(m)); };
  if (!(p.temperature >= 0.0f)) return bad(fmt::format("temperature is {}; it must be >= 0", p.temperature));
  if (p.top_k < 0) return bad(fmt::format("top_k is {}; it must be >= 0 (0 disables it)", p.top_k));
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return bad(fmt::format("top_p is {}; it must be in (0, 1]", p.top_p));
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return bad(fmt::format("min_p is {}; it must be in [0, 1]", p.min_p));
  if (!(p.repetition_penalty > 0.0f)) {
    return bad(fmt::format("repetition_penalty is {}; it must be > 0 (1 disables it)", p.repetition_penalty));
  }
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f)) {
    return bad(fmt::format("presence_penalty is {}; it must be in [-2, 2]", p.presence_penalty));
  }
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f)) {
    return bad(fmt::format("frequency_penalty is {}; it must be in [-2, 2]", p.frequency_penalty));
  }
  for (const auto& [token, bias] : p.logit_bias) {
    if (token < 0 || token >= n_vocab) {
      return bad(fmt::format("logit_bias names token {}, outside the vocabulary [0, {})", token, n_vocab));
    }
  }
  if (p.max_tokens < 1) return bad(fmt::format("max_tokens is {}; it must be >= 1", p.max_tokens));
  for (const std::string& s : p.stop) {
    if (s.empty()) return bad("stop contains an empty string; remove it");
  }
  for (int32_t token : p.stop_token_ids) {
    if (token < 0 || token >= n_vocab) {
      return bad(fmt::format("stop_token_ids names token {}, outside the vocabulary [0, {})", token, n_vocab));
    }
  }
  if (p.logprobs < -1 || p.logprobs > kMaxLogprobs) {
    return bad(fmt::format("logprobs is {}; it must be in [0, {}]", p.logprobs, kMaxLogprobs));
  }
  return ok_status();
}

}  // namespace koi::engine
