// Tensor views: non-owning, typed views over bytes that live elsewhere (a memory-mapped
// model file, an arena, a std::vector). Shapes are in ggml order: ne[0] is the innermost,
// contiguous dimension; a 2-D weight of a linear layer y = W x has ne = {in, out}, i.e. `out`
// rows of `in` values. Views are cheap to copy and never free what they point to.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tensor/dtype.h"

namespace koi {

constexpr int kMaxDims = 4;

struct TensorView {
  DType type = DType::kF32;
  int n_dims = 0;
  std::array<int64_t, kMaxDims> ne{1, 1, 1, 1};
  const void* data = nullptr;

  int64_t num_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t row_bytes() const { return dtype_row_bytes(type, ne[0]); }
  int64_t num_rows() const { return ne[1] * ne[2] * ne[3]; }
  int64_t num_bytes() const { return row_bytes() * num_rows(); }
  const uint8_t* row(int64_t r) const { return static_cast<const uint8_t*>(data) + r * row_bytes(); }
  const float* f32() const { return static_cast<const float*>(data); }
  // "[64, 512]" in ggml order.
  std::string shape_string() const;
};

// Builds a view; dims are given innermost first.
TensorView make_view(DType type, std::initializer_list<int64_t> ne, const void* data);

}  // namespace koi
