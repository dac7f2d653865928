// DraftModelProposer: speculative tokens from a small draft model that shares the target's
// vocabulary. For each decoding request it proposes up to k tokens autoregressively, all
// requests batched together: k draft forwards per step, one per draft position.
//
// Draft KV: the proposer owns a BlockPool over the draft runner's KvCache (no prefix
// caching) and, per request id, a block table and the tokens whose KV that table holds.
// Those tokens are a prefix of the request's tokens followed by the drafts last fed to the
// draft model. Each proposal first rolls the state back to its longest common prefix with
// the request's tokens (keeping at least the last token out, whose logits are needed):
// what remains is exactly the accepted prefix, and the rest (the token sampled at
// verification, a rejected draft's replacement, or the whole prompt of a request new to the
// proposer) is recomputed in the first draft forward. Blocks past the accepted prefix stay
// with the request and are overwritten; free() returns them all, and the engine calls it
// when a request finishes, is aborted or is preempted.
//
// Round 0 of a proposal feeds each request its missing tokens, round j its draft d_j; the
// logits of the last fed token give the next draft's distribution q: the draft model's
// logits through the request's own sampling_probs (penalties count the output and the
// earlier drafts). Greedy requests take its argmax (a point mass); sampling requests draw
// from q with the request's Rng and keep q in Request::spec_draft_probs for verification.
//
// Round 0 computes at most max_num_batched_tokens tokens, like a target step: a request
// whose missing tokens (a long prompt) do not fit is fed what fits and catches up over the
// next steps, with no drafts until then. Requests past the budget, or for which the pool has
// no room this step, get no drafts and keep their state.
// A failed draft forward returns its Status and leaves every request without drafts; the
// draft KV written so far is never trusted (it is not recorded as held).
// Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "base/status.h"
#include "engine/block_pool.h"
#include "engine/model_runner.h"
#include "engine/request.h"
#include "model/forward_batch.h"

namespace koi::engine {

struct DraftRequest {
  Request* request;
  int num_drafts;  // k: drafts wanted, > 0
};

class DraftModelProposer {
 public:
  // `runner` must outlive the proposer; its KvCache has num_blocks blocks of block_size
  // tokens. Round 0 computes at most max_num_batched_tokens missing tokens.
  DraftModelProposer(ModelRunner& runner, int num_blocks, int block_size, int max_num_batched_tokens);

  // Sets spec_token_ids (and spec_draft_probs) of every request in `requests`, each a
  // decoding request (all its tokens but the last computed by the target).
  Status propose(std::span<const DraftRequest> requests);
  // Drops the request's draft state and returns its blocks; no-op for an unknown id.
  void free(const std::string& request_id);

  const BlockPool& pool() const { return pool_; }
  // Tokens whose draft KV is held for the request; 0 for an unknown id.
  int num_cached_tokens(const std::string& request_id) const;

 private:
  struct State {
    std::vector<int32_t> block_table;
    std::vector<int32_t> tokens;  // the KV in block_table, position by position
  };
  struct Drafting {
    Request* request;
    State* state;
    int num_feed;    // tokens missing from the draft KV that round 0 computes
    int num_drafts;  // 0 while catching up
  };

  // Grows the block table to cover num_positions; false, changing nothing, if the pool is short.
  bool reserve(State& state, int num_positions);
  // Appends a request's tokens for one round to batch_: round 0 its num_feed tokens
  // missing from the draft KV, round j > 0 its draft d_j; and a logit row if it drafts.
  void add_to_batch(const Drafting& d, int round);
  // Draws the next draft of a request from its row of draft logits.
  void draft_next(Request& request, std::span<const float> logits);

  ModelRunner& runner_;
  int block_size_;
  int max_num_batched_tokens_;
  BlockPool pool_;
  std::unordered_map<std::string, State> states_;
  model::ForwardBatch batch_;
  std::vector<float> logits_;
  std::vector<float> probs_;
};

}  // namespace koi::engine
