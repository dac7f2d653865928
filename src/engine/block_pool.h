// BlockPool: the fixed set of KV-cache blocks of one engine, with reference counts, the
// content hashes of cached full blocks, and a free list in eviction order.
//
// Every block is either in use (ref_count > 0) or on the free list. The free list is a
// doubly linked list threaded through the blocks: allocation takes from the head, a block
// whose last reference is dropped goes to the tail, so the head is always the least
// recently used free block. A free block may still hold a cached hash (its KV content is
// valid and a later request with the same prefix can take it back with touch()); it loses
// the hash only when allocate() hands it out again, which is the LRU eviction of the prefix
// cache. All blocks are usable: there is no reserved null block (nothing in Koi needs a
// placeholder block id).
//
// Allocation is prepare-then-commit: allocate(n) either returns n blocks or changes nothing.
// Not thread-safe: the engine thread owns the pool.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "engine/block_hash.h"
#include "engine/kv_events.h"

namespace koi::engine {

class BlockPool {
 public:
  explicit BlockPool(int num_blocks);

  int num_blocks() const { return static_cast<int>(blocks_.size()); }
  // Length of the free list, cached-but-unreferenced blocks included.
  int num_free_blocks() const { return num_free_; }
  // Fraction of blocks in use (ref_count > 0), in [0, 1].
  double usage() const;

  // Takes n blocks from the head of the free list, each with ref_count 1 and no hash (a
  // cached hash it held is evicted). Returns nullopt, changing nothing, if fewer than n
  // blocks are free.
  std::optional<std::vector<int32_t>> allocate(int n);
  // The cached block holding `hash`, if any (in use or free).
  std::optional<int32_t> lookup(const BlockHash& hash) const;
  // Adds a reference to each block (prefix-cache hits); a free block leaves the free list.
  void touch(const std::vector<int32_t>& block_ids);
  // Drops one reference from each block, in order; a block reaching 0 goes to the tail of
  // the free list, keeping its hash.
  void release(const std::vector<int32_t>& block_ids);
  // Records that in-use block `block_id` is full and holds the content named by `hash`.
  // Returns false (and records nothing) if another block already caches that hash.
  bool cache(int32_t block_id, const BlockHash& hash);

  int ref_count(int32_t block_id) const { return blocks_[block_id].ref_count; }
  const std::optional<BlockHash>& hash(int32_t block_id) const { return blocks_[block_id].hash; }
  // From now on, every hash that enters the cache (cache()) or leaves it (allocate() evicting
  // it) is appended to `log` (not owned; null: no log).
  void set_event_log(std::vector<KvEvent>* log) { events_ = log; }

  // The free list from head (next to evict) to tail; O(n), for tests and debugging.
  std::vector<int32_t> free_list() const;

 private:
  static constexpr int32_t kNone = -1;
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;
    int32_t prev = kNone;  // free-list links, valid while ref_count == 0
    int32_t next = kNone;
  };

  void push_back_free(int32_t block_id);
  void unlink_free(int32_t block_id);

  std::vector<Block> blocks_;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> cached_;
  int32_t head_ = kNone;
  int32_t tail_ = kNone;
  int num_free_ = 0;
  std::vector<KvEvent>* events_ = nullptr;
};

}  // namespace koi::engine
