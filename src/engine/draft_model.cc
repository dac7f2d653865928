#include "engine/draft_model.h"

#include <algorithm>

#include "base/check.h"

namespace koi::engine {

DraftModelProposer::DraftModelProposer(ModelRunner& runner, int num_blocks, int block_size, int max_num_batched_tokens)
    : runner_(runner), block_size_(block_size), max_num_batched_tokens_(max_num_batched_tokens), pool_(num_blocks) {
  KOI_CHECK(block_size > 0 && max_num_batched_tokens > 0);
}

bool DraftModelProposer::reserve(State& state, int num_positions) {
  const int num_new = (num_positions + block_size_ - 1) / block_size_ - static_cast<int>(state.block_table.size());
  if (num_new <= 0) return true;
  std::optional<std::vector<int32_t>> fresh = pool_.allocate(num_new);
  if (!fresh) return false;
  state.block_table.insert(state.block_table.end(), fresh->begin(), fresh->end());
  return true;
}

void DraftModelProposer::add_to_batch(const Drafting& d, int round) {
  const Request& r = *d.request;
  const int32_t seq = static_cast<int32_t>(batch_.sequences.size());
  batch_.sequences.push_back({d.state->block_table});
  auto push = [&](int32_t token, int pos) {
    batch_.token_ids.push_back(token);
    batch_.positions.push_back(pos);
    batch_.seq_index.push_back(seq);
  };
  if (round == 0) {
    const int from = static_cast<int>(d.state->tokens.size());
    for (int pos = from; pos < from + d.num_feed; ++pos) push(r.token_ids[pos], pos);
  } else {
    push(r.spec_token_ids[round - 1], r.num_tokens() + round - 1);
  }
  if (d.num_drafts > round) batch_.logit_indices.push_back(static_cast<int32_t>(batch_.token_ids.size()) - 1);
}

void DraftModelProposer::draft_next(Request& r, std::span<const float> logits) {
  std::vector<int32_t> history(r.output().begin(), r.output().end());
  history.insert(history.end(), r.spec_token_ids.begin(), r.spec_token_ids.end());
  sampling_probs(r.params, logits, r.prompt(), history, &probs_);
  if (r.params.temperature == 0.0f) {  // one-hot: the draft is a point mass
    r.spec_token_ids.push_back(static_cast<int32_t>(std::max_element(probs_.begin(), probs_.end()) - probs_.begin()));
    return;
  }
  r.spec_token_ids.push_back(draw(probs_, r.rng));
  r.spec_draft_probs.insert(r.spec_draft_probs.end(), probs_.begin(), probs_.end());
}

Status DraftModelProposer::propose(std::span<const DraftRequest> requests) {
  std::vector<Drafting> drafting;
  int budget = max_num_batched_tokens_;
  for (const DraftRequest& d : requests) {
    Request& r = *d.request;
    KOI_CHECK(d.num_drafts > 0 && r.num_computed_tokens == r.num_tokens() - 1);
    r.spec_token_ids.clear();
    r.spec_draft_probs.clear();
    // The last draft is never fed back: the draft model sees num_tokens + k - 1 positions.
    const int num_drafts = std::min(d.num_drafts, runner_.max_context() - r.num_tokens() + 1);
    if (num_drafts <= 0 || budget == 0) continue;
    State& state = states_[r.id];
    // Roll back to the accepted prefix, always leaving the last token to feed.
    const auto differ = std::mismatch(state.tokens.begin(), state.tokens.end(), r.token_ids.begin(), r.token_ids.end());
    const size_t num_kept = std::min(static_cast<size_t>(differ.first - state.tokens.begin()), r.token_ids.size() - 1);
    state.tokens.resize(num_kept);
    if (!reserve(state, r.num_tokens() + num_drafts - 1)) continue;
    const int num_missing = r.num_tokens() - static_cast<int>(num_kept);
    const int num_feed = std::min(num_missing, budget);
    budget -= num_feed;
    drafting.push_back({&r, &state, num_feed, num_feed == num_missing ? num_drafts : 0});
  }

  const size_t n_vocab = static_cast<size_t>(runner_.n_vocab());
  for (int round = 0;; ++round) {
    if (round > 0) std::erase_if(drafting, [&](const Drafting& d) { return d.num_drafts <= round; });
    if (drafting.empty()) return ok_status();
    batch_.clear();
    for (const Drafting& d : drafting) add_to_batch(d, round);
    logits_.resize(batch_.logit_indices.size() * n_vocab);
    if (Status s = runner_.forward(batch_, logits_.data()); !s.ok()) {
      for (const DraftRequest& d : requests) {
        d.request->spec_token_ids.clear();
        d.request->spec_draft_probs.clear();
      }
      return s;
    }
    size_t row = 0;
    for (const Drafting& d : drafting) {
      Request& r = *d.request;
      std::vector<int32_t>& held = d.state->tokens;
      if (round == 0) {
        held.insert(held.end(), r.token_ids.begin() + static_cast<std::ptrdiff_t>(held.size()),
                    r.token_ids.begin() + static_cast<std::ptrdiff_t>(held.size()) + d.num_feed);
      } else {
        held.push_back(r.spec_token_ids[round - 1]);
      }
      if (d.num_drafts > round) draft_next(r, std::span<const float>(logits_).subspan(row++ * n_vocab, n_vocab));
    }
  }
}

void DraftModelProposer::free(const std::string& request_id) {
  auto it = states_.find(request_id);
  if (it == states_.end()) return;
  const std::vector<int32_t> tail_first(it->second.block_table.rbegin(), it->second.block_table.rend());
  pool_.release(tail_first);
  states_.erase(it);
}

int DraftModelProposer::num_cached_tokens(const std::string& request_id) const {
  auto it = states_.find(request_id);
  return it == states_.end() ? 0 : static_cast<int>(it->second.tokens.size());
}

}  // namespace koi::engine
