// sgemm: the f32 matrix product of the training passes, C = A B (+ C), with A and B read
// through strides so that one routine serves x W^T (forward), dy W (input gradient) and
// dy^T x (weight gradient) without transposed copies.
//
// It packs B into panels of NR columns and each MR-row panel of A, then runs a register-tiled
// micro-kernel (AVX-512 12x32, AVX2 6x16, portable 4x16) over the whole K in one pass: every
// C[i, j] is the sum over k = 0..K-1 in order, accumulated by fused multiply-adds from zero,
// then added to C when accumulate is set. So results never depend on the thread count or on
// how the rows are split (threads take whole row panels), and differ between ISA levels only
// by rounding. Works on caller-owned memory; thread-safe; must be called by the pool's owner.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"

namespace koi::kernels {

// A strided read-only matrix: element (r, c) is data[r * row_stride + c * col_stride].
struct StridedMatrix {
  const float* data;
  int64_t row_stride;
  int64_t col_stride;
};

// C (M, N, row-major with leading dimension ldc) = A (M, K) B (K, N), or C += A B when
// accumulate. K may be 0 (C unchanged or zeroed).
void sgemm(int64_t M, int64_t N, int64_t K, StridedMatrix a, StridedMatrix b, float* c, int64_t ldc,
           bool accumulate, ThreadPool* pool);

namespace ref {
// The scalar reference: the same sum in the same order, one element at a time.
void sgemm(int64_t M, int64_t N, int64_t K, StridedMatrix a, StridedMatrix b, float* c, int64_t ldc,
           bool accumulate);
}  // namespace ref

}  // namespace koi::kernels
