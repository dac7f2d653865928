// The AVX2 sgemm micro-kernel: a 6 x 16 tile of C in 12 ymm accumulators; per k two loads of
// B and six broadcasts of A feed 12 fused multiply-adds.
#include <immintrin.h>

#include "kernels/gemm_kernels.h"

#pragma GCC target("avx2,fma")

namespace koi::kernels::avx2 {
namespace {

constexpr int kMr = 6, kNr = 16;

template <bool kRowMajorA>
void tile(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
          bool accumulate) {
  __m256 lo[kMr], hi[kMr];
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) lo[i] = hi[i] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b + k * ldb), b1 = _mm256_loadu_ps(b + k * ldb + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMr; ++i) {
      const __m256 ai = _mm256_set1_ps(kRowMajorA ? a[i * lda + k] : a[k * lda + i]);
      lo[i] = _mm256_fmadd_ps(ai, b0, lo[i]);
      hi[i] = _mm256_fmadd_ps(ai, b1, hi[i]);
    }
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMr; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      lo[i] = _mm256_add_ps(_mm256_loadu_ps(row), lo[i]);
      hi[i] = _mm256_add_ps(_mm256_loadu_ps(row + 8), hi[i]);
    }
    _mm256_storeu_ps(row, lo[i]);
    _mm256_storeu_ps(row + 8, hi[i]);
  }
}

}  // namespace

GemmKernel gemm_kernel() { return {kMr, kNr, tile<true>, tile<false>}; }

}  // namespace koi::kernels::avx2
