#include "engine/block_pool.h"

#include "base/check.h"

namespace koi::engine {

BlockPool::BlockPool(int num_blocks) : blocks_(static_cast<size_t>(num_blocks)) {
  KOI_CHECK(num_blocks > 0);
  for (int32_t block_id = 0; block_id < num_blocks; ++block_id) push_back_free(block_id);
}

double BlockPool::usage() const {
  return 1.0 - static_cast<double>(num_free_) / static_cast<double>(blocks_.size());
}

std::optional<std::vector<int32_t>> BlockPool::allocate(int n) {
  if (n > num_free_) return std::nullopt;
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    const int32_t block_id = head_;
    unlink_free(block_id);
    Block& block = blocks_[block_id];
    if (block.hash) {
      if (events_) events_->push_back({KvEvent::Kind::kRemoved, *block.hash});
      cached_.erase(*block.hash);
      block.hash.reset();
    }
    block.ref_count = 1;
    ids.push_back(block_id);
  }
  return ids;
}

std::optional<int32_t> BlockPool::lookup(const BlockHash& hash) const {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return std::nullopt;
  return it->second;
}

void BlockPool::touch(const std::vector<int32_t>& block_ids) {
  for (int32_t block_id : block_ids) {
    if (blocks_[block_id].ref_count == 0) unlink_free(block_id);
    ++blocks_[block_id].ref_count;
  }
}

void BlockPool::release(const std::vector<int32_t>& block_ids) {
  for (int32_t block_id : block_ids) {
    Block& block = blocks_[block_id];
    KOI_CHECK(block.ref_count > 0);
    if (--block.ref_count == 0) push_back_free(block_id);
  }
}

bool BlockPool::cache(int32_t block_id, const BlockHash& hash) {
  Block& block = blocks_[block_id];
  KOI_CHECK(block.ref_count > 0 && !block.hash);
  if (!cached_.emplace(hash, block_id).second) return false;
  block.hash = hash;
  if (events_) events_->push_back({KvEvent::Kind::kStored, hash});
  return true;
}

std::vector<int32_t> BlockPool::free_list() const {
  std::vector<int32_t> ids;
  for (int32_t block_id = head_; block_id != kNone; block_id = blocks_[block_id].next) ids.push_back(block_id);
  return ids;
}

void BlockPool::push_back_free(int32_t block_id) {
  Block& block = blocks_[block_id];
  block.prev = tail_;
  block.next = kNone;
  if (tail_ == kNone) {
    head_ = block_id;
  } else {
    blocks_[tail_].next = block_id;
  }
  tail_ = block_id;
  ++num_free_;
}

void BlockPool::unlink_free(int32_t block_id) {
  Block& block = blocks_[block_id];
  if (block.prev == kNone) {
    head_ = block.next;
  } else {
    blocks_[block.prev].next = block.next;
  }
  if (block.next == kNone) {
    tail_ = block.prev;
  } else {
    blocks_[block.next].prev = block.prev;
  }
  block.prev = block.next = kNone;
  --num_free_;
}

}  // namespace koi::engine
