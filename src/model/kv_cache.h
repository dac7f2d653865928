// KvCache: the paged key/value memory of one model, as a fixed number of blocks of
// block_size token slots. For each layer there is one K and one V array of
// num_blocks * block_size slots; a slot holds the n_kv_heads * head_dim values of one token,
// stored as the shape's dtype: f32 (the default), f16, or q8_0 (GGUF's block: 32 int8 values
// and an f16 scale, so each head is whole blocks and head_dim must be a multiple of 32;
// check_kv_dtype says so). Values enter through write(), which rounds or quantizes them; the
// attention kernel (kernels/attention.h) reads the stored bytes and dequantizes inside its tiles.
// Sliding-window layers may be kept apart (KvCacheShape::windowed): their K/V then live in the
// blocks of a sequence's window table, the other layers' in its full table (ForwardBatch), each
// block holding page_layers() layers of one kind, so the engine can release a windowed layer's
// blocks once they leave the window (engine/kv_cache_manager.h).
// Which sequence owns which block is the engine's business (engine/block_pool.h); this
// class only owns the memory, which starts as untouched zero pages (base/zero_pages.h): a
// block becomes resident when it is first written, so a large cache costs nothing at start-up.
// Move-only. Not thread-safe: the engine thread owns it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "base/zero_pages.h"
#include "tensor/dtype.h"

namespace koi::model {

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;
  DType dtype = DType::kF32;  // f32, f16 or q8_0
  // Empty: every layer's K/V in one table. Else one flag per layer: set for the sliding-window
  // layers, whose K/V go to the window table's blocks; `window` is their window in positions.
  std::vector<bool> windowed;
  int window = 0;

  int64_t slot_floats() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }  // values per slot
  int64_t head_bytes() const { return dtype_row_bytes(dtype, head_dim); }
  int64_t slot_bytes() const { return n_kv_heads * head_bytes(); }
  bool split() const { return !windowed.empty(); }
  int num_windowed() const { return static_cast<int>(std::count(windowed.begin(), windowed.end(), true)); }
  bool has_full_layers() const { return !split() || num_windowed() < n_layers; }
  // Layers one block holds: all of them, or with split layers the larger of the two kinds.
  int page_layers() const { return split() ? std::max(num_windowed(), n_layers - num_windowed()) : n_layers; }
  // Bytes of K and V for one block.
  int64_t bytes_per_block() const { return 2LL * page_layers() * block_size * slot_bytes(); }
  // Blocks a sequence of `tokens` tokens holds at most when computed in chunks of at most
  // chunk_tokens: its full table and, with split layers, the window table's blocks that the
  // chunk's tokens read (at most window + chunk_tokens positions).
  int64_t blocks_for_sequence(int tokens, int chunk_tokens) const {
    const int64_t n = (tokens + block_size - 1) / block_size;
    if (!split()) return n;
    return (has_full_layers() ? n : 0) + std::min(n, window_blocks(chunk_tokens));
  }
  // The most window-table blocks a sequence holds (split layers only).
  int64_t window_blocks(int chunk_tokens) const {
    return (int64_t{window} + chunk_tokens + block_size - 1) / block_size + 1;
  }
  // The longest sequence (in tokens) that num_blocks blocks hold, for that chunk size.
  int64_t capacity_tokens(int chunk_tokens) const {
    const int64_t n = num_blocks, w = window_blocks(chunk_tokens);
    if (!split()) return n * block_size;
    if (!has_full_layers()) return n >= w ? INT64_MAX / 2 : n * block_size;  // only the window is kept
    return (n >= 2 * w ? n - w : n / 2) * block_size;                        // n_full + min(n_full, w) <= n
  }
};

// Ok when the KV memory can be stored as `dtype` for heads of head_dim values; otherwise an
// error naming --kv-dtype (f32, f16 and q8_0 only; q8_0 needs head_dim a multiple of 32).
Status check_kv_dtype(DType dtype, int head_dim);

class KvCache {
 public:
  // The shape must pass check_kv_dtype (a programmer error otherwise).
  explicit KvCache(const KvCacheShape& shape);

  const KvCacheShape& shape() const { return shape_; }
  // The stored bytes of a slot (shape().slot_bytes() of them), K or V.
  std::byte* k(int layer, int64_t slot) { return at(k_, layer, slot); }
  std::byte* v(int layer, int64_t slot) { return at(v_, layer, slot); }
  const std::byte* k(int layer, int64_t slot) const { return at(k_, layer, slot); }
  const std::byte* v(int layer, int64_t slot) const { return at(v_, layer, slot); }
  // Stores one token's K and V (slot_floats() values each) in the cache's dtype.
  void write(int layer, int64_t slot, const float* k, const float* v);
  // Head `head` of a slot as f32: into the cache when it is f32, else dequantized into
  // `scratch` (head_dim floats), which is returned.
  const float* k_head(int layer, int64_t slot, int head, float* scratch) const;
  const float* v_head(int layer, int64_t slot, int head, float* scratch) const;
  int64_t capacity_tokens() const { return static_cast<int64_t>(shape_.num_blocks) * shape_.block_size; }

 private:
  std::byte* at(const ZeroPages& pages, int layer, int64_t slot) const {
    return static_cast<std::byte*>(pages.data()) + page_index_[layer] * layer_bytes_ + slot * shape_.slot_bytes();
  }
  const float* head(const ZeroPages& pages, int layer, int64_t slot, int head, float* scratch) const;

  KvCacheShape shape_;
  int64_t layer_bytes_;
  std::vector<int> page_index_;  // per layer: its place among the page_layers() of a block
  ZeroPages k_;  // [page_layers][num_blocks * block_size][n_kv_heads][head_bytes] of dtype
  ZeroPages v_;
};

}  // namespace koi::model
