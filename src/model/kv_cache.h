// KvCache: the paged key/value memory of one model, as a fixed number of blocks of
// block_size token slots. For each layer there is one K and one V array of
// num_blocks * block_size slots; a slot holds n_kv_heads * head_dim f32 values.
// Which sequence owns which block is the engine's business (engine/block_pool.h); this
// class only owns the memory, which starts as untouched zero pages (base/zero_pages.h): a
// block becomes resident when it is first written, so a large cache costs nothing at start-up.
// Move-only. Not thread-safe: the engine thread owns it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/zero_pages.h"

namespace koi::model {

struct KvCacheShape {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int block_size = 16;
  int num_blocks = 0;

  int64_t slot_floats() const { return static_cast<int64_t>(n_kv_heads) * head_dim; }
  // Bytes of K and V across all layers for one block.
  int64_t bytes_per_block() const {
    return 2LL * n_layers * block_size * slot_floats() * static_cast<int64_t>(sizeof(float));
  }
};

class KvCache {
 public:
  explicit KvCache(const KvCacheShape& shape)
      : shape_(shape),
        layer_floats_(static_cast<int64_t>(shape.num_blocks) * shape.block_size * shape.slot_floats()),
        k_(static_cast<size_t>(layer_floats_ * shape.n_layers) * sizeof(float)),
        v_(static_cast<size_t>(layer_floats_ * shape.n_layers) * sizeof(float)) {}

  const KvCacheShape& shape() const { return shape_; }
  float* k(int layer, int64_t slot) { return at(k_, layer, slot); }
  float* v(int layer, int64_t slot) { return at(v_, layer, slot); }
  const float* k(int layer, int64_t slot) const { return at(k_, layer, slot); }
  const float* v(int layer, int64_t slot) const { return at(v_, layer, slot); }
  int64_t capacity_tokens() const { return static_cast<int64_t>(shape_.num_blocks) * shape_.block_size; }

 private:
  float* at(const ZeroPages& pages, int layer, int64_t slot) const {
    return static_cast<float*>(pages.data()) + layer * layer_floats_ + slot * shape_.slot_floats();
  }

  KvCacheShape shape_;
  int64_t layer_floats_;
  ZeroPages k_;  // [n_layers][num_blocks * block_size][slot_floats] f32
  ZeroPages v_;
};

}  // namespace koi::model
