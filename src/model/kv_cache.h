// KvCache: the paged key/value memory of one model, as a fixed number of blocks of
// block_size token slots. For each layer there is one K and one V array of
// num_blocks * block_size slots; a slot holds the n_kv_heads * head_dim values of one token,
// stored as the shape's dtype: f32 (the default), f16, or q8_0 (GGUF's block: 32 int8 values
// and an f16 scale, so each head is whole blocks and head_dim must be a multiple of 32;
// check_kv_dtype says so). Values enter through write(), which rounds or quantizes them; the
// attention kernel (kernels/attention.h) reads the stored bytes and dequantizes inside its tiles.
// Which sequence owns which block is the engine's business (engine/block_pool.h); this
// class only owns the memory, which starts as untouched zero pages (base/zero_pages.h): a
// block becomes resident when it is first written, so a large cache costs nothing at start-up.
// Move-only. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>

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

  int64_t slot_floats() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }  // values per slot
  int64_t head_bytes() const { return dtype_row_bytes(dtype, head_dim); }
  int64_t slot_bytes() const { return n_kv_heads * head_bytes(); }
  // Bytes of K and V across all layers for one block.
  int64_t bytes_per_block() const { return 2LL * n_layers * block_size * slot_bytes(); }
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
    return static_cast<std::byte*>(pages.data()) + layer * layer_bytes_ + slot * shape_.slot_bytes();
  }
  const float* head(const ZeroPages& pages, int layer, int64_t slot, int head, float* scratch) const;

  KvCacheShape shape_;
  int64_t layer_bytes_;
  ZeroPages k_;  // [n_layers][num_blocks * block_size][n_kv_heads][head_bytes] of dtype
  ZeroPages v_;
};

}  // namespace koi::model
