#include "engine/spec_decode.h"

#include <algorithm>
#include <limits>
#include <optional>

#include <fmt/format.h>

#include "base/check.h"

namespace koi::engine {

Result<SpeculativeMethod> parse_speculative_method(std::string_view name) {
  if (name == "ngram") return SpeculativeMethod::kNgram;
  if (name == "draft") return SpeculativeMethod::kDraftModel;
  return Status::invalid_argument(
      fmt::format("unknown speculative method '{}'; use 'ngram' (prompt lookup) or 'draft' (a draft model)", name));
}

Status validate(const SpeculativeConfig& c, const ModelRunner& target) {
  if (c.num_speculative_tokens < 0) {
    return Status::invalid_argument(
        fmt::format("speculative: num_speculative_tokens is {}; it must be >= 0 (0 turns speculation off)",
                    c.num_speculative_tokens));
  }
  if (c.method == SpeculativeMethod::kNgram) {
    if (c.prompt_lookup_min < 1 || c.prompt_lookup_max < c.prompt_lookup_min) {
      return Status::invalid_argument(
          fmt::format("speculative: prompt lookup sizes are [{}, {}]; need 1 <= prompt_lookup_min <= prompt_lookup_max",
                      c.prompt_lookup_min, c.prompt_lookup_max));
    }
    return ok_status();
  }
  if (c.draft_runner == nullptr) {
    return Status::invalid_argument(
        "speculative: method 'draft' needs a draft model; load one that shares the target's tokenizer, or use 'ngram'");
  }
  if (c.draft_runner->n_vocab() != target.n_vocab()) {
    return Status::invalid_argument(fmt::format(
        "speculative: the draft model has a vocabulary of {} tokens but the target has {}; a draft model must use "
        "the target's tokenizer",
        c.draft_runner->n_vocab(), target.n_vocab()));
  }
  if (c.draft_num_kv_blocks <= 0) {
    return Status::invalid_argument(fmt::format(
        "speculative: draft_num_kv_blocks is {}; give the draft model's KV cache at least one block",
        c.draft_num_kv_blocks));
  }
  return ok_status();
}

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

namespace {

// p <- norm(max(0, p - q)), the distribution to draw from after a rejection. Rounding can
// leave no mass (p and q equal but for the last bit); p is then kept, as p == q means the
// draft was as good as a draw from p.
void to_residual(std::vector<float>& p, std::span<const float> q) {
  std::vector<float> residual(p.size());
  double mass = 0.0;
  for (size_t t = 0; t < p.size(); ++t) mass += residual[t] = std::max(0.0f, p[t] - q[t]);
  if (mass > 0.0) p.swap(residual);
}

}  // namespace

namespace {

// The row with every token the grammar does not allow at -infinity.
std::span<const float> masked_row(const grammar::TokenMask& mask, std::span<const float> row, std::vector<float>* out) {
  out->assign(row.begin(), row.end());
  grammar::apply_mask(mask, *out);
  return *out;
}

}  // namespace

std::vector<SampledToken> sample_with_drafts(Request& r, std::span<const float> logits, int n_vocab, int budget) {
  const SamplingParams& params = r.params;
  const bool greedy = params.temperature == 0.0f;
  const size_t vocab = static_cast<size_t>(n_vocab);
  const std::span<const float> draft_probs = r.spec_draft_probs;  // empty: every q is a point mass
  KOI_CHECK(draft_probs.empty() || draft_probs.size() >= r.spec_token_ids.size() * vocab);
  std::vector<int32_t> history(r.output().begin(), r.output().end());  // outputs, then accepted drafts
  std::vector<SampledToken> out;
  std::vector<float> probs;
  std::optional<grammar::Matcher> ahead = r.matcher;  // advanced over the accepted drafts
  std::vector<float> masked;
  auto pick = [&] {
    return greedy ? static_cast<int32_t>(std::max_element(probs.begin(), probs.end()) - probs.begin())
                  : draw(probs, r.rng);
  };
  for (size_t row = 0;; ++row) {
    const auto row_logits = logits.subspan(row * vocab, vocab);
    std::span<const float> constrained = row_logits;
    if (ahead) {
      const auto mask = ahead->allowed(budget > 0 ? std::max(1, budget - static_cast<int>(row)) : 0);
      // No token continues the document (a vocabulary without the bytes it needs): the
      // scheduler ends the request when the grammar rejects what comes out.
      if (mask->count() > 0) constrained = masked_row(*mask, row_logits, &masked);
    }
    sampling_probs(params, constrained, r.prompt(), history, &probs);
    if (row == r.spec_token_ids.size()) {  // bonus token, or plain sampling without drafts
      out.push_back(with_logprobs(params, pick(), row_logits));
      return out;
    }
    const int32_t draft = r.spec_token_ids[row];
    const auto q = draft_probs.empty() ? std::span<const float>() : draft_probs.subspan(row * vocab, vocab);
    // Accept with probability min(1, p/q): u * q < p with u uniform in [0, 1).
    const float q_draft = q.empty() ? 1.0f : q[draft];
    const bool accepted = greedy ? probs[draft] == 1.0f : r.rng.uniform() * q_draft < probs[draft];
    if (!accepted) {
      if (q.empty()) {
        probs[draft] = 0.0f;  // max(0, p - q) for a point mass on the draft
      } else {
        to_residual(probs, q);
      }
      out.push_back(with_logprobs(params, pick(), row_logits));
      return out;
    }
    out.push_back(with_logprobs(params, draft, row_logits));
    history.push_back(draft);
    if (ahead) ahead->accept(draft);
  }
}

}  // namespace koi::engine
