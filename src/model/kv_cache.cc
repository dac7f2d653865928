#include "model/kv_cache.h"

#include <string>

#include "base/check.h"

namespace koi::model {

Status check_kv_dtype(DType dtype, int head_dim) {
  if (dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kQ8_0) {
    return Status::invalid_argument("--kv-dtype " + std::string(dtype_name(dtype)) +
                                    " is not a KV cache type; use f32, f16 or q8_0");
  }
  if (head_dim % dtype_block_size(dtype) != 0) {
    return Status::invalid_argument("--kv-dtype " + std::string(dtype_name(dtype)) + " stores each head in blocks of " +
                                    std::to_string(dtype_block_size(dtype)) + " values, but this model's heads have " +
                                    std::to_string(head_dim) + "; use --kv-dtype f16 or f32");
  }
  return ok_status();
}

KvCache::KvCache(const KvCacheShape& shape)
    : shape_(shape),
      layer_bytes_(static_cast<int64_t>(shape.num_blocks) * shape.block_size * shape.slot_bytes()),
      k_(static_cast<size_t>(layer_bytes_ * shape.page_layers())),
      v_(static_cast<size_t>(layer_bytes_ * shape.page_layers())) {
  KOI_CHECK(check_kv_dtype(shape.dtype, shape.head_dim).ok());
  KOI_CHECK(!shape.split() || (static_cast<int>(shape.windowed.size()) == shape.n_layers && shape.window > 0));
  int num_windowed = 0, num_full = 0;  // a layer's place among the layers of its kind
  for (int layer = 0; layer < shape.n_layers; ++layer) {
    page_index_.push_back(shape.split() && shape.windowed[layer] ? num_windowed++ : num_full++);
  }
}

void KvCache::write(int layer, int64_t slot, const float* k, const float* v) {
  // Every head is whole blocks of the dtype, so quantizing the slot as one row quantizes each head.
  quantize_row(shape_.dtype, k, this->k(layer, slot), shape_.slot_floats());
  quantize_row(shape_.dtype, v, this->v(layer, slot), shape_.slot_floats());
}

const float* KvCache::head(const ZeroPages& pages, int layer, int64_t slot, int head, float* scratch) const {
  const std::byte* src = at(pages, layer, slot) + head * shape_.head_bytes();
  if (shape_.dtype == DType::kF32) return reinterpret_cast<const float*>(src);
  dequantize_row(shape_.dtype, src, scratch, shape_.head_dim);
  return scratch;
}

const float* KvCache::k_head(int layer, int64_t slot, int head, float* scratch) const {
  return this->head(k_, layer, slot, head, scratch);
}

const float* KvCache::v_head(int layer, int64_t slot, int head, float* scratch) const {
  return this->head(v_, layer, slot, head, scratch);
}

}  // namespace koi::model
