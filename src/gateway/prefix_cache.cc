#include "gateway/prefix_cache.h"

namespace koi::gateway {

size_t LruBlockSet::match_prefix(std::span<const uint64_t> blocks) const {
  size_t n = 0;
  while (n < blocks.size() && index_.count(blocks[n])) ++n;
  return n;
}

void LruBlockSet::insert(std::span<const uint64_t> blocks) {
  for (uint64_t h : blocks) {
    auto it = index_.find(h);
    if (it != index_.end()) {
      order_.splice(order_.begin(), order_, it->second);
      continue;
    }
    order_.push_front(h);
    index_[h] = order_.begin();
    if (index_.size() > capacity_) {
      index_.erase(order_.back());
      order_.pop_back();
    }
  }
}

std::vector<uint64_t> chain_text_blocks(std::string_view text, size_t block_bytes) {
  std::vector<uint64_t> out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a offset basis; each block continues the chain
  for (size_t start = 0; start + block_bytes <= text.size(); start += block_bytes) {
    for (size_t i = start; i < start + block_bytes; ++i) {
      h ^= static_cast<unsigned char>(text[i]);
      h *= 1099511628211ull;
    }
    out.push_back(h);
  }
  return out;
}

}  // namespace koi::gateway
