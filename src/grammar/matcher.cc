#include "grammar/matcher.h"

#include <algorithm>
#include <bit>
#include <limits>

#include "base/check.h"

namespace koi::grammar {

namespace {

constexpr int32_t kUnknown = -2;
constexpr int32_t kDead = -1;

uint64_t hash_tops(const std::vector<int32_t>& tops) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : tops) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
  return h;
}

}  // namespace

int TokenMask::count() const {
  int n = 0;
  for (uint32_t w : bits) n += std::popcount(w);
  return n;
}

void apply_mask(const TokenMask& mask, std::span<float> logits) {
  constexpr float kRefused = -std::numeric_limits<float>::infinity();
  const size_t n = logits.size();
  for (size_t word = 0; word * 32 < n; ++word) {
    const uint32_t bits = mask.bits[word];
    if (bits == ~uint32_t{0}) continue;
    const size_t begin = word * 32, end = std::min(n, begin + 32);
    if (bits == 0) {
      std::fill(logits.begin() + static_cast<std::ptrdiff_t>(begin), logits.begin() + static_cast<std::ptrdiff_t>(end),
                kRefused);
      continue;
    }
    for (size_t t = begin; t < end; ++t) {
      if (!((bits >> (t - begin)) & 1)) logits[t] = kRefused;
    }
  }
}

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const Vocabulary> vocab, size_t mask_memory)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)) {
  std::lock_guard lock(mu_);
  max_masks_ = std::max<size_t>(16, mask_memory / (static_cast<size_t>(vocab_->n_vocab()) / 8 + 64));
  nodes_.push_back({-1, -1});  // kAccepted: the empty stack
  expansions_.push_back({kAccepted});
  expanded_.push_back(1);
  successors_.emplace_back();
  succeeded_.push_back(1);
  node_min_.push_back(0);
  std::vector<int32_t> tops;
  for (int32_t start : grammar_.rule_alternatives[grammar_.root]) {
    const std::vector<int32_t>& e = expansion(intern_node(start, kAccepted));
    tops.insert(tops.end(), e.begin(), e.end());
  }
  initial_ = intern_state(std::move(tops));
}

GrammarStats CompiledGrammar::stats() const {
  std::lock_guard lock(mu_);
  GrammarStats s = stats_;
  s.num_nodes = static_cast<int64_t>(nodes_.size());
  s.num_states = static_cast<int64_t>(states_.size());
  return s;
}

int32_t CompiledGrammar::intern_node(int32_t pos, int32_t parent) {
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32) | static_cast<uint32_t>(parent);
  auto [it, inserted] = node_ids_.try_emplace(key, static_cast<int32_t>(nodes_.size()));
  if (inserted) {
    nodes_.push_back({pos, parent});
    expansions_.emplace_back();
    expanded_.push_back(0);
    successors_.emplace_back();
    succeeded_.push_back(0);
    node_min_.push_back(-1);
  }
  return it->second;
}

// The stacks under `node` with a byte set on top: a rule reference on top is replaced by
// each of its alternatives (the frame continues after the reference; a reference at the
// end of its sequence continues at the parent, so right recursion keeps the depth), and a
// finished sequence pops to its parent.
const std::vector<int32_t>& CompiledGrammar::expansion(int32_t node) {
  if (expanded_[node]) return expansions_[node];
  std::vector<int32_t> out;
  const Node n = nodes_[node];
  const Element e = grammar_.elements[n.pos];
  if (e.kind == ElementKind::kBytes) {
    out.push_back(node);
  } else if (e.kind == ElementKind::kEnd) {
    out = expansion(n.parent);
  } else {
    const bool tail = grammar_.elements[n.pos + 1].kind == ElementKind::kEnd;
    const int32_t cont = tail ? n.parent : intern_node(n.pos + 1, n.parent);
    for (int32_t start : grammar_.rule_alternatives[e.value]) {
      const int32_t child = intern_node(start, cont);
      const std::vector<int32_t> sub = expansion(child);  // a copy: expansion() may grow the vectors
      out.insert(out.end(), sub.begin(), sub.end());
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  expansions_[node] = std::move(out);
  expanded_[node] = 1;
  return expansions_[node];
}

const std::vector<int32_t>& CompiledGrammar::successors(int32_t top) {
  if (succeeded_[top]) return successors_[top];
  const Node n = nodes_[top];
  std::vector<int32_t> out = expansion(intern_node(n.pos + 1, n.parent));
  successors_[top] = std::move(out);
  succeeded_[top] = 1;
  return successors_[top];
}

int32_t CompiledGrammar::intern_state(std::vector<int32_t> tops) {
  std::sort(tops.begin(), tops.end());
  tops.erase(std::unique(tops.begin(), tops.end()), tops.end());
  if (tops.empty()) return kDead;
  std::vector<int32_t>& bucket = state_ids_[hash_tops(tops)];
  for (int32_t id : bucket) {
    if (states_[id] == tops) return id;
  }
  const int32_t id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(tops));
  std::array<int32_t, 256> row;
  row.fill(kUnknown);
  transitions_.push_back(row);
  state_min_.push_back(-1);
  bucket.push_back(id);
  return id;
}

int32_t CompiledGrammar::advance_locked(int32_t state, uint8_t byte) {
  int32_t& cached = transitions_[state][byte];
  if (cached != kUnknown) return cached;
  std::vector<int32_t> next;
  for (int32_t top : states_[state]) {
    if (top == kAccepted) continue;
    if (!grammar_.byte_sets[grammar_.elements[nodes_[top].pos].value].test(byte)) continue;
    const std::vector<int32_t>& s = successors(top);
    next.insert(next.end(), s.begin(), s.end());
  }
  const int32_t id = intern_state(std::move(next));
  transitions_[state][byte] = id;  // `cached` may dangle: intern_state grows transitions_
  return id;
}

int32_t CompiledGrammar::advance(int32_t state, uint8_t byte) {
  std::lock_guard lock(mu_);
  return advance_locked(state, byte);
}

int32_t CompiledGrammar::advance_token(int32_t state, int32_t token) {
  const std::string& bytes = vocab_->bytes(token);
  if (bytes.empty()) return kDead;
  std::lock_guard lock(mu_);
  for (char c : bytes) {
    state = advance_locked(state, static_cast<uint8_t>(c));
    if (state == kDead) return kDead;
  }
  return state;
}

bool CompiledGrammar::accepting(int32_t state) {
  std::lock_guard lock(mu_);
  return states_[state].front() == kAccepted;  // sorted: the empty stack sorts first
}

bool CompiledGrammar::finished(int32_t state) {
  std::lock_guard lock(mu_);
  return states_[state].size() == 1 && states_[state].front() == kAccepted;
}

int32_t CompiledGrammar::node_min(int32_t node) {
  if (node_min_[node] >= 0) return node_min_[node];
  const Node n = nodes_[node];
  const int32_t m = grammar_.min_bytes_from[n.pos] + node_min(n.parent);
  node_min_[node] = m;
  return m;
}

int32_t CompiledGrammar::state_min(int32_t state) {
  if (state_min_[state] >= 0) return state_min_[state];
  int32_t best = std::numeric_limits<int32_t>::max();
  for (int32_t top : states_[state]) best = std::min(best, node_min(top));
  state_min_[state] = best;
  return best;
}

int32_t CompiledGrammar::min_completion(int32_t state) {
  std::lock_guard lock(mu_);
  return state_min(state);
}

// One preorder walk of the token trie: walk_[d] is the state after the first d bytes of the
// current node's path; a rejected byte skips the node's whole subtree.
void CompiledGrammar::fill_mask(int32_t state, int32_t limit, TokenMask* out) {
  ++stats_.masks_computed;
  const Vocabulary& v = *vocab_;
  out->bits.assign((static_cast<size_t>(v.n_vocab()) + 31) / 32, 0);
  out->max_completion = 0;
  auto allow = [&](int32_t token) { out->bits[static_cast<size_t>(token) >> 5] |= uint32_t{1} << (token & 31); };
  if (states_[state].front() == kAccepted) {
    for (int32_t eos : v.eos_ids()) allow(eos);
  }
  walk_.assign(static_cast<size_t>(v.max_depth()) + 1, kDead);
  walk_[0] = state;
  const std::vector<Vocabulary::TrieNode>& trie = v.trie();
  const std::vector<int32_t>& tokens = v.trie_tokens();
  for (size_t i = 0; i < trie.size();) {
    const Vocabulary::TrieNode& node = trie[i];
    const int32_t next = advance_locked(walk_[node.depth - 1], node.byte);
    if (next == kDead) {
      i = static_cast<size_t>(node.skip);
      continue;
    }
    walk_[node.depth] = next;
    if (node.tokens_begin != node.tokens_end) {
      const int32_t need = state_min(next);
      if (limit < 0 || need <= limit) {
        for (int32_t k = node.tokens_begin; k < node.tokens_end; ++k) allow(tokens[k]);
        out->max_completion = std::max(out->max_completion, need);
      }
    }
    ++i;
  }
}

std::shared_ptr<const TokenMask> CompiledGrammar::mask(int32_t state, int budget) {
  std::lock_guard lock(mu_);
  ++stats_.masks_served;
  if (masks_.size() + budget_masks_.size() >= max_masks_) {
    masks_.clear();
    budget_masks_.clear();
    ++stats_.mask_flushes;
  }
  std::shared_ptr<const TokenMask>& full = masks_[state];
  if (!full) {
    auto m = std::make_shared<TokenMask>();
    fill_mask(state, -1, m.get());
    full = std::move(m);
  }
  // After this token, budget - 1 tokens remain for the rest of the document.
  if (budget <= 0 || budget - 1 >= full->max_completion) return full;
  const uint64_t key = (static_cast<uint64_t>(state) << 32) | static_cast<uint32_t>(budget);
  std::shared_ptr<const TokenMask>& limited = budget_masks_[key];
  if (!limited) {
    auto m = std::make_shared<TokenMask>();
    fill_mask(state, budget - 1, m.get());
    // Nothing completes in time: the document gets cut at the length limit either way.
    limited = m->count() == 0 ? full : std::shared_ptr<const TokenMask>(std::move(m));
  }
  return limited;
}

bool Matcher::accept(int32_t token) {
  if (ended_) return false;
  if (grammar_->vocab().is_eos(token)) {
    if (!grammar_->accepting(state_)) return false;
    ended_ = true;
    return true;
  }
  const int32_t next = grammar_->advance_token(state_, token);
  if (next < 0) return false;
  state_ = next;
  return true;
}

}  // namespace koi::grammar
