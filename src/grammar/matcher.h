// CompiledGrammar and Matcher: running a Grammar against a Vocabulary, one token at a time.
//
// The matcher's state is the set of parse stacks the bytes so far leave open (a pushdown
// automaton run breadth-first, as llama.cpp's grammar sampler does). Stacks are interned
// as nodes (position in the grammar, parent node), so a stack is one integer; a state is
// the sorted set of its stacks' top nodes, interned too, with its byte transitions memoised
// in a 256-entry row. States therefore repeat (inside a JSON string every ordinary
// character leads back to the same state) and the vocabulary mask of a state is computed
// once — one preorder walk of the token trie, pruning at the first rejected byte — and
// kept: the per-state token sets. A step that hits the cache costs a table lookup.
//
// Length budget: a mask also knows, for each allowed token, the fewest bytes that would
// complete the grammar after it. When a request has fewer tokens left than a token's
// completion needs, that token is dropped (the mask for that budget is computed and kept
// too), so a constrained request that runs into max_tokens still ends in a complete
// document, provided the vocabulary has a token for every single byte the completion
// needs (byte-fallback and byte-level vocabularies do).
//
// End of generation: the end tokens are allowed exactly when the grammar accepts; a state
// with nothing left to match but the end is finished() and the request stops there.
//
// Threading: a CompiledGrammar is shared by every request using the same constraint; its
// caches are guarded by a mutex, so matchers of one grammar may run on several threads.
// A Matcher is a small value (copy it to try tokens ahead, as draft verification does);
// one thread per Matcher.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"
#include "grammar/vocabulary.h"

namespace koi::grammar {

// Allowed tokens: bit t of bits[t / 32].
struct TokenMask {
  std::vector<uint32_t> bits;
  int32_t max_completion = 0;  // most bytes any allowed token leaves to complete the grammar
  bool test(int32_t token) const { return (bits[static_cast<size_t>(token) >> 5] >> (token & 31)) & 1; }
  int count() const;
};

// Sets every logit the mask does not allow to -infinity (logits.size() tokens), a 32-token
// word at a time: whole words allowed or refused cost one comparison.
void apply_mask(const TokenMask& mask, std::span<float> logits);

struct GrammarStats {
  int64_t num_nodes = 0;
  int64_t num_states = 0;
  int64_t masks_computed = 0;  // trie walks (cache misses)
  int64_t masks_served = 0;    // mask() calls
  int64_t mask_flushes = 0;    // times the mask cache hit its memory bound and was dropped
};

class CompiledGrammar {
 public:
  // mask_memory: about how many bytes of masks it keeps (at least 16 masks).
  CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab, size_t mask_memory = size_t{64} << 20);

  const Grammar& grammar() const { return grammar_; }
  const Vocabulary& vocab() const { return *vocab_; }
  GrammarStats stats() const;

  // The state before any byte.
  int32_t initial_state() const { return initial_; }
  // The state after `byte`, or -1 when the grammar rejects it.
  int32_t advance(int32_t state, uint8_t byte);
  // After every byte of `token`; -1 when rejected (end tokens are not bytes: see Matcher).
  int32_t advance_token(int32_t state, int32_t token);
  bool accepting(int32_t state);  // the bytes so far are a complete document
  bool finished(int32_t state);   // complete, and nothing may follow
  int32_t min_completion(int32_t state);  // fewest bytes to a complete document
  // The tokens allowed in `state` when `budget` tokens may still be generated, this one
  // included (budget <= 0: no limit). Kept per state until the grammar holds mask_memory
  // bytes of masks, when all are dropped and computed again as states recur.
  std::shared_ptr<const TokenMask> mask(int32_t state, int budget);

 private:
  static constexpr int32_t kAccepted = 0;  // node id of the empty stack

  int32_t intern_node(int32_t pos, int32_t parent);
  const std::vector<int32_t>& expansion(int32_t node);  // the byte-matching tops under a node
  const std::vector<int32_t>& successors(int32_t top);  // tops after `top` matched its byte
  int32_t intern_state(std::vector<int32_t> tops);
  int32_t advance_locked(int32_t state, uint8_t byte);
  int32_t node_min(int32_t node);
  int32_t state_min(int32_t state);
  void fill_mask(int32_t state, int32_t limit, TokenMask* out);

  Grammar grammar_;
  std::shared_ptr<const Vocabulary> vocab_;
  int32_t initial_ = -1;

  mutable std::mutex mu_;
  struct Node {
    int32_t pos;
    int32_t parent;
  };
  std::vector<Node> nodes_;                                  // guarded by mu_
  std::unordered_map<uint64_t, int32_t> node_ids_;           // guarded by mu_
  std::vector<std::vector<int32_t>> expansions_;             // guarded by mu_; per node
  std::vector<char> expanded_;                               // guarded by mu_
  std::vector<std::vector<int32_t>> successors_;             // guarded by mu_; per node
  std::vector<char> succeeded_;                              // guarded by mu_
  std::vector<int32_t> node_min_;                            // guarded by mu_; -1 unknown
  std::vector<std::vector<int32_t>> states_;                 // guarded by mu_
  std::unordered_map<uint64_t, std::vector<int32_t>> state_ids_;  // guarded by mu_: hash -> ids
  std::vector<std::array<int32_t, 256>> transitions_;        // guarded by mu_; -2 unknown
  std::vector<int32_t> state_min_;                           // guarded by mu_
  std::unordered_map<int32_t, std::shared_ptr<const TokenMask>> masks_;          // guarded by mu_
  std::unordered_map<uint64_t, std::shared_ptr<const TokenMask>> budget_masks_;  // guarded by mu_
  size_t max_masks_ = 0;
  std::vector<int32_t> walk_;                                // guarded by mu_: trie walk scratch
  GrammarStats stats_;                                       // guarded by mu_
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<CompiledGrammar> grammar)
      : grammar_(std::move(grammar)), state_(grammar_->initial_state()) {}

  // Tokens allowed next with `budget` tokens left to generate, this one included.
  std::shared_ptr<const TokenMask> allowed(int budget) const { return grammar_->mask(state_, budget); }
  // Moves past `token`; false (and no change) when the grammar does not allow it.
  bool accept(int32_t token);
  bool accepting() const { return ended_ || grammar_->accepting(state_); }
  // Nothing more may be generated: an end token was accepted, or the document is complete
  // and the grammar allows nothing after it.
  bool finished() const { return ended_ || grammar_->finished(state_); }
  int32_t state() const { return state_; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  int32_t state_;
  bool ended_ = false;
};

}  // namespace koi::grammar
