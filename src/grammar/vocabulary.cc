#include "grammar/vocabulary.h"

#include <algorithm>
#include <numeric>

namespace koi::grammar {

Vocabulary::Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : token_bytes_(std::move(token_bytes)), eos_ids_(std::move(eos_ids)) {
  std::vector<int32_t> order;
  for (int32_t id = 0; id < n_vocab(); ++id) {
    if (!token_bytes_[id].empty() && !is_eos(id)) order.push_back(id);
  }
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return token_bytes_[a] < token_bytes_[b]; });
  // Sorted strings list the trie in preorder: each string adds the nodes past its common
  // prefix with the previous one.
  std::vector<int32_t> path;
  const std::string* prev = nullptr;
  for (int32_t id : order) {
    const std::string& s = token_bytes_[id];
    size_t common = 0;
    if (prev) {
      while (common < prev->size() && common < s.size() && (*prev)[common] == s[common]) ++common;
    }
    while (path.size() > common) {
      trie_[path.back()].skip = static_cast<int32_t>(trie_.size());
      path.pop_back();
    }
    for (size_t d = common; d < s.size(); ++d) {
      TrieNode node;
      node.byte = static_cast<uint8_t>(s[d]);
      node.depth = static_cast<uint16_t>(d + 1);
      node.tokens_begin = node.tokens_end = static_cast<int32_t>(trie_tokens_.size());
      path.push_back(static_cast<int32_t>(trie_.size()));
      trie_.push_back(node);
    }
    trie_tokens_.push_back(id);
    trie_[path.back()].tokens_end = static_cast<int32_t>(trie_tokens_.size());
    max_depth_ = std::max(max_depth_, static_cast<int>(s.size()));
    prev = &s;
  }
  for (int32_t node : path) trie_[node].skip = static_cast<int32_t>(trie_.size());
}

bool Vocabulary::is_eos(int32_t id) const { return std::find(eos_ids_.begin(), eos_ids_.end(), id) != eos_ids_.end(); }

std::shared_ptr<const Vocabulary> Vocabulary::from_tokenizer(const tokenizer::Tokenizer& tok,
                                                             std::vector<int32_t> eos_ids) {
  std::vector<std::string> bytes(static_cast<size_t>(tok.n_vocab()));
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const tokenizer::TokenType type = tok.token_type(id);
    if (type == tokenizer::TokenType::kControl || type == tokenizer::TokenType::kUnused ||
        type == tokenizer::TokenType::kUnknown) {
      continue;
    }
    // As its own predecessor a normal token is never at the start of text.
    tok.append_piece(id, /*prev=*/id, /*skip_special=*/true, &bytes[id]);
  }
  return std::make_shared<const Vocabulary>(std::move(bytes), std::move(eos_ids));
}

}  // namespace koi::grammar
