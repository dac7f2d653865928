// LruBlockSet: an LRU set of KV block hashes with a fixed capacity, the model of what one
// replica's prefix cache holds. Block hashes are chained (each block's hash covers all the
// blocks before it), so "the first k hashes of a request are in the set" is a prefix match and
// the set is an approximate prefix tree. The router keeps one per replica; the routing
// benchmark also uses one per simulated replica as the ground truth. Not thread-safe.
//
// chain_text_blocks() cuts a prompt into fixed-size byte chunks and chains their hashes; the
// gateway has no tokenizer, so it matches prefixes of prompt text (full chunks only).
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <span>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace koi::gateway {

class LruBlockSet {
 public:
  explicit LruBlockSet(size_t capacity) : capacity_(capacity) {}

  // How many leading hashes of `blocks` are in the set (touches nothing).
  size_t match_prefix(std::span<const uint64_t> blocks) const;
  // Inserts or refreshes every hash, evicting the least recently used beyond capacity.
  void insert(std::span<const uint64_t> blocks);
  size_t size() const { return index_.size(); }

 private:
  size_t capacity_;
  std::list<uint64_t> order_;  // most recent first
  std::unordered_map<uint64_t, std::list<uint64_t>::iterator> index_;
};

std::vector<uint64_t> chain_text_blocks(std::string_view text, size_t block_bytes);

}  // namespace koi::gateway
