#include "engine/kv_cache_manager.h"

#include <algorithm>

#include "base/check.h"

namespace koi::engine {
namespace {

// The parent of a window table's first block: that chain never meets the full table's, whose
// blocks hold other layers' KV for the same tokens.
constexpr BlockHash kWindowRoot{0x9e3779b97f4a7c15ULL, 0x57494e444f57ULL};

// The blocks among `ids` (kReleased entries skipped).
std::vector<int32_t> held(const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  std::copy_if(ids.begin(), ids.end(), std::back_inserter(out), [](int32_t id) { return id != KvCacheManager::kReleased; });
  return out;
}

int count_unreferenced(const BlockPool& pool, const std::vector<int32_t>& ids) {
  return static_cast<int>(std::count_if(ids.begin(), ids.end(), [&](int32_t id) {
    return id != KvCacheManager::kReleased && pool.ref_count(id) == 0;
  }));
}

}  // namespace

KvCacheManager::KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching, KvGroups groups)
    : block_size_(block_size), enable_prefix_caching_(enable_prefix_caching), groups_(groups), pool_(num_blocks) {
  KOI_CHECK(block_size > 0 && groups.window >= 0 && (groups.full || groups.window > 0));
}

void KvCacheManager::hash_blocks(const Request& request, Group group, size_t num_full_blocks,
                                 std::vector<BlockHash>& hashes) const {
  for (size_t block_idx = hashes.size(); block_idx < num_full_blocks; ++block_idx) {
    const BlockHash root = group == Group::kWindow ? kWindowRoot : BlockHash{};
    const BlockHash parent = block_idx == 0 ? root : hashes[block_idx - 1];
    const auto tokens = std::span<const int32_t>(request.token_ids)
                            .subspan(block_idx * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_));
    hashes.push_back(hash_block(parent, tokens, request.cache_key));
  }
}

int KvCacheManager::first_window_block(int position) const {
  return std::max(0, position - groups_.window + 1) / block_size_;
}

std::vector<int32_t> KvCacheManager::out_of_window(const Blocks& window, int position) const {
  const size_t end = std::min(static_cast<size_t>(first_window_block(position)), window.ids.size());
  return held(std::vector<int32_t>(window.ids.begin(), window.ids.begin() + static_cast<ptrdiff_t>(end)));
}

ComputedBlocks KvCacheManager::get_computed_blocks(const Request& request) {
  ComputedBlocks computed;
  if (!enable_prefix_caching_) return computed;
  KOI_CHECK(block_table(request).empty() && window_block_table(request).empty());
  const size_t max_blocks = static_cast<size_t>((request.num_tokens() - 1) / block_size_);
  size_t hit = max_blocks;
  if (groups_.full) {
    std::vector<BlockHash> hashes;
    hash_blocks(request, Group::kFull, max_blocks, hashes);
    for (const BlockHash& hash : hashes) {
      const std::optional<int32_t> block_id = pool_.lookup(hash);
      if (!block_id) break;
      computed.block_ids.push_back(*block_id);
    }
    hit = computed.block_ids.size();
  }
  if (groups_.window > 0) {
    std::vector<BlockHash> hashes;
    hash_blocks(request, Group::kWindow, hit, hashes);
    std::vector<std::optional<int32_t>> found;
    for (const BlockHash& hash : hashes) found.push_back(pool_.lookup(hash));
    // The longest hit whose next token finds every window block it reads.
    auto window_cached = [&](size_t h) {
      for (size_t b = static_cast<size_t>(first_window_block(static_cast<int>(h) * block_size_)); b < h; ++b) {
        if (!found[b]) return false;
      }
      return true;
    };
    while (hit > 0 && !window_cached(hit)) --hit;
    computed.window_block_ids.assign(hit, kReleased);
    for (size_t b = static_cast<size_t>(first_window_block(static_cast<int>(hit) * block_size_)); b < hit; ++b) {
      computed.window_block_ids[b] = *found[b];
    }
    computed.block_ids.resize(std::min(computed.block_ids.size(), hit));
  }
  computed.num_tokens = static_cast<int>(hit) * block_size_;
  return computed;
}

bool KvCacheManager::allocate_slots(const Request& request, int num_new_tokens, const ComputedBlocks& computed) {
  auto it = requests_.find(request.id);
  static const Tables kNone;
  const Tables& before = it == requests_.end() ? kNone : it->second;
  const size_t num_held = before.full.ids.size() + before.window.ids.size();
  KOI_CHECK((computed.block_ids.empty() && computed.window_block_ids.empty()) || num_held == 0);
  const int first_new_pos = request.num_computed_tokens + computed.num_tokens;
  const int num_required = blocks_for_tokens(first_new_pos + num_new_tokens);
  const auto num_new = [&](const Blocks& blocks, const std::vector<int32_t>& hits) {
    return std::max(0, num_required - static_cast<int>(blocks.ids.size() + hits.size()));
  };
  const int num_new_full = groups_.full ? num_new(before.full, computed.block_ids) : 0;
  const int num_new_window = groups_.window > 0 ? num_new(before.window, computed.window_block_ids) : 0;
  const std::vector<int32_t> leaving =
      groups_.window > 0 ? out_of_window(before.window, first_new_pos) : std::vector<int32_t>{};
  // Hits on free blocks take them off the free list, so they count against it; blocks leaving
  // the window that no other request holds join it.
  const int num_free_hits = count_unreferenced(pool_, computed.block_ids) +
                            count_unreferenced(pool_, computed.window_block_ids);
  const int num_freed = static_cast<int>(
      std::count_if(leaving.begin(), leaving.end(), [&](int32_t id) { return pool_.ref_count(id) == 1; }));
  if (num_new_full + num_new_window + num_free_hits > pool_.num_free_blocks() + num_freed) return false;

  if (num_held == 0) {
    stats_.queried_tokens += request.num_tokens();
    stats_.hit_tokens += computed.num_tokens;
  }
  Tables& tables = requests_[request.id];
  release_window(tables.window, leaving);
  pool_.touch(held(computed.block_ids));
  pool_.touch(held(computed.window_block_ids));
  const auto extend = [&](Blocks& blocks, const std::vector<int32_t>& hits, int n) {
    blocks.ids.insert(blocks.ids.end(), hits.begin(), hits.end());
    blocks.num_cached = std::max(blocks.num_cached, hits.size());
    std::optional<std::vector<int32_t>> fresh = pool_.allocate(n);
    KOI_CHECK(fresh.has_value());
    blocks.ids.insert(blocks.ids.end(), fresh->begin(), fresh->end());
  };
  extend(tables.full, computed.block_ids, num_new_full);
  extend(tables.window, computed.window_block_ids, num_new_window);
  return true;
}

void KvCacheManager::release_window(Blocks& window, const std::vector<int32_t>& leaving) {
  pool_.release(leaving);
  for (int32_t& id : window.ids) {
    if (std::find(leaving.begin(), leaving.end(), id) != leaving.end()) id = kReleased;
  }
}

void KvCacheManager::release_out_of_window(const Request& request, int position) {
  auto it = requests_.find(request.id);
  if (groups_.window == 0 || it == requests_.end()) return;
  release_window(it->second.window, out_of_window(it->second.window, position));
}

void KvCacheManager::cache(const Request& request, Group group, Blocks& blocks) {
  const size_t num_full = std::min(static_cast<size_t>(request.num_computed_tokens / block_size_), blocks.ids.size());
  hash_blocks(request, group, num_full, blocks.hashes);
  for (; blocks.num_cached < num_full; ++blocks.num_cached) {
    const int32_t id = blocks.ids[blocks.num_cached];
    if (id != kReleased) pool_.cache(id, blocks.hashes[blocks.num_cached]);
  }
}

void KvCacheManager::cache_full_blocks(const Request& request) {
  if (!enable_prefix_caching_) return;
  auto it = requests_.find(request.id);
  if (it == requests_.end()) return;
  cache(request, Group::kFull, it->second.full);
  cache(request, Group::kWindow, it->second.window);
}

void KvCacheManager::free(const Request& request) {
  auto it = requests_.find(request.id);
  if (it == requests_.end()) return;
  for (const Blocks* blocks : {&it->second.window, &it->second.full}) {
    std::vector<int32_t> tail_first = held(blocks->ids);
    std::reverse(tail_first.begin(), tail_first.end());
    pool_.release(tail_first);
  }
  requests_.erase(it);
}

const std::vector<int32_t>& KvCacheManager::block_table(const Request& request) const {
  static const std::vector<int32_t> kEmpty;
  auto it = requests_.find(request.id);
  return it == requests_.end() ? kEmpty : it->second.full.ids;
}

const std::vector<int32_t>& KvCacheManager::window_block_table(const Request& request) const {
  static const std::vector<int32_t> kEmpty;
  auto it = requests_.find(request.id);
  return it == requests_.end() ? kEmpty : it->second.window.ids;
}

int KvCacheManager::num_blocks_held(const Request& request) const {
  return static_cast<int>(held(block_table(request)).size() + held(window_block_table(request)).size());
}

}  // namespace koi::engine
