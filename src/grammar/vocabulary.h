// Vocabulary: each token's bytes as the detokenizer renders it mid-text, the end-of-
// generation tokens, and a byte trie over all tokens laid out in preorder, so the matcher
// computes a vocabulary mask in one walk that skips every subtree the grammar rejects at
// its first byte. Built once per model; immutable and shared between threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace koi::grammar {

class Vocabulary {
 public:
  // token_bytes[id] empty: the token is never allowed by a grammar (control tokens).
  // eos_ids: allowed once the grammar has reached an accepting state.
  Vocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids);

  // From a tokenizer: SentencePiece pieces with their space ("▁the" is " the"), byte
  // tokens as their byte, byte-level BPE decoded; control tokens empty.
  static std::shared_ptr<const Vocabulary> from_tokenizer(const tokenizer::Tokenizer& tok,
                                                          std::vector<int32_t> eos_ids);

  struct TrieNode {
    uint8_t byte = 0;
    uint16_t depth = 0;      // 1 for the first byte of a token
    int32_t skip = 0;        // the index of the next node outside this subtree
    int32_t tokens_begin = 0;
    int32_t tokens_end = 0;  // trie_tokens()[begin, end) end exactly here
  };

  int32_t n_vocab() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::string& bytes(int32_t id) const { return token_bytes_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eos_ids() const { return eos_ids_; }
  bool is_eos(int32_t id) const;
  const std::vector<TrieNode>& trie() const { return trie_; }
  const std::vector<int32_t>& trie_tokens() const { return trie_tokens_; }
  int max_depth() const { return max_depth_; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> eos_ids_;
  std::vector<TrieNode> trie_;
  std::vector<int32_t> trie_tokens_;
  int max_depth_ = 0;
};

}  // namespace koi::grammar
