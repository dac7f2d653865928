#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "base/check.h"

namespace koi::engine {

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching), pool_(num_blocks) {
  KOI_CHECK(block_size > 0);
}

void KvCacheManager::hash_blocks(const Request& request, size_t num_full_blocks,
                                 std::vector<BlockHash>& hashes) const {
  for (size_t block_idx = hashes.size(); block_idx < num_full_blocks; ++block_idx) {
    const BlockHash parent = block_idx == 0 ? BlockHash{} : hashes[block_idx - 1];
    const auto tokens = std::span<const int32_t>(request.token_ids)
                            .subspan(block_idx * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    hashes.push_back(hash_block(parent, tokens, request.cache_key));
  }
}

ComputedBlocks KvCacheManager::get_computed_blocks(const Request& request) {
  ComputedBlocks computed;
  if (!enable_prefix_caching_) return computed;
  KOI_CHECK(block_table(request).empty());
  const size_t max_blocks = static_cast<size_t>((request.num_tokens() - 1) / block_size_);
  std::vector<BlockHash> hashes;
  hash_blocks(request, max_blocks, hashes);
  for (const BlockHash& hash : hashes) {
    const std::optional<int32_t> block_id = pool_.lookup(hash);
    if (!block_id) break;
    computed.block_ids.push_back(*block_id);
  }
  computed.num_tokens = static_cast<int>(computed.block_ids.size()) * block_size_;
  return computed;
}

bool KvCacheManager::allocate_slots(const Request& request, int num_new_tokens, const ComputedBlocks& computed) {
  auto it = requests_.find(request.id);
  const size_t num_held = it == requests_.end() ? 0 : it->second.ids.size();
  KOI_CHECK(computed.block_ids.empty() || num_held == 0);
  const int num_tokens = request.num_computed_tokens + computed.num_tokens + num_new_tokens;
  const int num_required = blocks_for_tokens(num_tokens);
  const int num_new_blocks =
      std::max(0, num_required - static_cast<int>(num_held) - static_cast<int>(computed.block_ids.size()));
  // Hits on free blocks take them off the free list, so they count against it too.
  const int num_free_hits = static_cast<int>(
      std::count_if(computed.block_ids.begin(), computed.block_ids.end(), [&](int32_t id) { return pool_.ref_count(id) == 0; }));
  if (num_new_blocks + num_free_hits > pool_.num_free_blocks()) return false;

  if (num_held == 0) {
    stats_.queried_tokens += request.num_tokens();
    stats_.hit_tokens += computed.num_tokens;
  }
  Blocks& blocks = requests_[request.id];
  pool_.touch(computed.block_ids);
  blocks.ids.insert(blocks.ids.end(), computed.block_ids.begin(), computed.block_ids.end());
  blocks.num_cached = std::max(blocks.num_cached, computed.block_ids.size());
  std::optional<std::vector<int32_t>> fresh = pool_.allocate(num_new_blocks);
  KOI_CHECK(fresh.has_value());
  blocks.ids.insert(blocks.ids.end(), fresh->begin(), fresh->end());
  return true;
}

void KvCacheManager::cache_full_blocks(const Request& request) {
  if (!enable_prefix_caching_) return;
  auto it = requests_.find(request.id);
  if (it == requests_.end()) return;
  Blocks& blocks = it->second;
  const size_t num_full = std::min(static_cast<size_t>(request.num_computed_tokens / block_size_), blocks.ids.size());
  hash_blocks(request, num_full, blocks.hashes);
  for (; blocks.num_cached < num_full; ++blocks.num_cached) {
    pool_.cache(blocks.ids[blocks.num_cached], blocks.hashes[blocks.num_cached]);
  }
}

void KvCacheManager::free(const Request& request) {
  auto it = requests_.find(request.id);
  if (it == requests_.end()) return;
  std::vector<int32_t> tail_first(it->second.ids.rbegin(), it->second.ids.rend());
  pool_.release(tail_first);
  requests_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::block_table(const Request& request) const {
  static const std::vector<int32_t> kEmpty;
  auto it = requests_.find(request.id);
  return it == requests_.end() ? kEmpty : it->second.ids;
}

}  // namespace koi::engine
