// PackedMatrix: a weight matrix prepared once for matmul. q8_0 and q4_0 weights are repacked at
// construction into the panel layout the quantized tiles read (16 rows per panel; per 32-value
// block, the 4-byte words of the 16 rows side by side and then their f16 scales: as many bytes as
// the file's blocks, plus the padding of a last partial panel), so that no call repacks and one
// layout serves every batch size from 1 token up. The values are bitwise those of the view, so
// matmul(PackedMatrix) gives bitwise matmul(view)'s result at every level and batch size.
//
// Owns its panels; the view it was built from is not owned and must outlive it (the view stays
// readable: the model may release the mapped pages of a packed tensor, and they fault back in if
// read). Other types, and a CPU with no SIMD level, keep only the view and matmul reads it as
// stored. Immutable after construction; safe to read from many threads. Allocation failure aborts,
// as for any std::vector.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <span>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace koi::kernels {

class PackedMatrix {
 public:
  PackedMatrix() = default;
  // w: a 2-D weight {in, out}. The packing runs on `pool` (may be null).
  explicit PackedMatrix(const TensorView& w, ThreadPool* pool = nullptr);

  const TensorView& view() const { return view_; }
  // The panels, or null when the matrix is read as stored.
  const uint32_t* panels() const { return panels_.get(); }
  // Bytes of the panels (0 when none).
  int64_t packed_bytes() const { return packed_bytes_; }

 private:
  struct Free {
    void operator()(uint32_t* p) const { std::free(p); }
  };
  TensorView view_;
  std::unique_ptr<uint32_t[], Free> panels_;
  int64_t packed_bytes_ = 0;
};

// As matmul(w.view(), ...) (ops.h), bitwise, reading the panels when there are some.
void matmul(const PackedMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool);

// y[i] = x w[i]^T for several matrices over one input x (n_tokens x in, the in of every w[i]):
// q, k and v, or gate and up. Each y[i] is bitwise matmul(*w[i], x, y[i], n_tokens, pool)'s. When
// every matrix has panels of one type, the activations are converted once and the rows of all
// the matrices go through one parallel region, so a decode step pays one conversion and one
// wait for the slowest thread per group instead of one per matrix.
void matmul(std::span<const PackedMatrix* const> w, const float* x, std::span<float* const> y, int64_t n_tokens,
            ThreadPool* pool);

}  // namespace koi::kernels
