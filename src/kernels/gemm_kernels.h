// Internal to src/kernels: the sgemm micro-kernels of the SIMD levels (gemm.h), each compiled
// for its level in gemm_<level>.cc. A micro-kernel computes one MR x NR tile of C: it sums
// A(i, k) B(k, j) over k in order from zero with fused multiply-adds and stores the tile into c
// (row stride ldc), adding to what is there when accumulate is set. B is read as rows of NR
// values, b(k, j) = b[k * ldb + j] (a packed panel, or B itself when its rows are contiguous).
// A is read in place in one of two layouts, each with its own kernel:
//   rows:    A(i, k) = a[i * lda + k]   (row-major A, such as x or dy)
//   columns: A(i, k) = a[k * lda + i]   (column-major A, such as dy^T, or a packed panel)
#pragma once

#include <cstdint>

namespace koi::kernels {

using GemmTileFn = void (*)(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                            bool accumulate);

struct GemmKernel {
  int mr, nr;
  GemmTileFn rows;     // row-major A
  GemmTileFn columns;  // column-major A
};

namespace avx2 {
GemmKernel gemm_kernel();  // 6 x 16
}  // namespace avx2
namespace avx512 {
GemmKernel gemm_kernel();  // 12 x 32
}  // namespace avx512

}  // namespace koi::kernels
