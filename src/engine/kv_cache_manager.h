// KvCacheManager: which KV blocks each request holds, and the automatic prefix cache.
//
// Each request has a block table (physical block ids in position order) drawn from one
// BlockPool. A full block of tokens is addressed by a hash chain (parent block's hash,
// its token ids, the request's cache_key), so a new request reuses every cached full block
// at the start of its tokens, and unreferenced cached blocks are evicted LRU by the pool.
// A block is entered into the cache only after the forward pass has written its KV
// (cache_full_blocks), so a hit never depends on the order of work inside one batch.
//
// Sliding-window layers (KvGroups::window > 0) keep their KV in blocks of their own: each
// request then has a second table, the window table, drawn from the same pool, whose block i
// holds those layers' K/V for positions [i * block_size, (i + 1) * block_size) (the full table
// holds the other layers'). A window-table block that lies wholly before the window of the
// request's next token (position p reads p - window + 1 .. p) is released when the request
// next allocates, and its entry becomes kReleased: a windowed layer costs at most
// ceil(window / block_size) + 1 blocks per sequence however long it grows. Window-table blocks
// are content-addressed like full-table blocks, in their own hash chain (they hold other
// layers), and stay in the prefix cache once released, until evicted. A prefix hit of h blocks
// needs every full-table block before it and only the window-table blocks the token after it
// reads: the longest such h is taken (get_computed_blocks).
//
// allocate_slots is all-or-nothing: it returns false and changes nothing when the pool
// cannot cover the request (blocks the window release would free count as free). free()
// releases a request's blocks tail first, so the blocks least likely to be shared are evicted
// first. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"
#include "engine/block_pool.h"
#include "engine/request.h"

namespace koi::engine {

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // tokens of requests looked up when they were admitted
  int64_t hit_tokens = 0;      // of those, tokens found in the cache
  double hit_rate() const { return queried_tokens ? static_cast<double>(hit_tokens) / queried_tokens : 0.0; }
};

// Which tables a request's KV takes: the full table (for layers that read the whole context)
// and, with window > 0, the window table of the sliding-window layers.
struct KvGroups {
  bool full = true;  // some layers read the whole context
  int window = 0;    // > 0: sliding-window layers, reading this many positions, keep their own table
};

// Prefix-cache hits for a request being admitted.
struct ComputedBlocks {
  std::vector<int32_t> block_ids;         // cached blocks covering the first num_tokens tokens
  std::vector<int32_t> window_block_ids;  // the window table's, kReleased where out of the window
  int num_tokens = 0;
};

class KvCacheManager {
 public:
  // A window-table entry whose block left the window and was released.
  static constexpr int32_t kReleased = -1;

  KvCacheManager(int num_blocks, int block_size, bool enable_prefix_caching, KvGroups groups = {});

  int block_size() const { return block_size_; }
  const KvGroups& groups() const { return groups_; }
  const BlockPool& pool() const { return pool_; }
  const PrefixCacheStats& prefix_cache_stats() const { return stats_; }
  // Prefix-cache changes go to `log` from now on (BlockPool::set_event_log).
  void set_event_log(std::vector<KvEvent>* log) { pool_.set_event_log(log); }

  // The longest run of cached full blocks at the start of a request that holds no blocks.
  // Never covers the last token, whose logits must be computed. Changes nothing.
  ComputedBlocks get_computed_blocks(const Request& request);
  // Makes room for num_new_tokens more tokens after the request's computed tokens (and after
  // `computed`, the hits from get_computed_blocks, for a request being admitted). Returns
  // false, changing nothing, if the pool is short.
  bool allocate_slots(const Request& request, int num_new_tokens, const ComputedBlocks& computed = {});
  // Releases the window-table blocks a token at `position` no longer reads (what the next
  // allocate_slots would release); a request whose KV was imported calls it before its blocks
  // are cached, so that window blocks the peer never sent are not entered.
  void release_out_of_window(const Request& request, int position);
  // Enters the request's full, computed blocks into the prefix cache.
  void cache_full_blocks(const Request& request);
  // Releases every block of the request.
  void free(const Request& request);

  // The request's full table and window table (kReleased entries); empty if it holds none or
  // the group does not exist.
  const std::vector<int32_t>& block_table(const Request& request) const;
  const std::vector<int32_t>& window_block_table(const Request& request) const;
  // Blocks the request holds now, in both tables.
  int num_blocks_held(const Request& request) const;
  int blocks_for_tokens(int num_tokens) const { return (num_tokens + block_size_ - 1) / block_size_; }

 private:
  struct Blocks {
    std::vector<int32_t> ids;
    std::vector<BlockHash> hashes;  // hashes of the first hashes.size() full blocks
    size_t num_cached = 0;          // leading ids already offered to the prefix cache
  };
  struct Tables {
    Blocks full, window;
  };
  enum class Group { kFull, kWindow };

  // Extends `hashes` to cover the first `num_full_blocks` full blocks of the request, in the
  // group's hash chain.
  void hash_blocks(const Request& request, Group group, size_t num_full_blocks, std::vector<BlockHash>& hashes) const;
  // The window-table blocks before this one are never read again by a token at `position`.
  int first_window_block(int position) const;
  // Held window-table blocks before first_window_block(position) (kReleased entries skipped).
  std::vector<int32_t> out_of_window(const Blocks& window, int position) const;
  void cache(const Request& request, Group group, Blocks& blocks);
  // Releases `leaving` (held window-table blocks) and marks their entries kReleased.
  void release_window(Blocks& window, const std::vector<int32_t>& leaving);

  int block_size_;
  bool enable_prefix_caching_;
  KvGroups groups_;
  BlockPool pool_;
  std::unordered_map<std::string, Tables> requests_;
  PrefixCacheStats stats_;
};

}  // namespace koi::engine
