// The AVX-512 sgemm micro-kernel: a 12 x 32 tile of C in 24 zmm accumulators; per k two loads
// of B and twelve broadcasts of A feed 24 fused multiply-adds.
#include <immintrin.h>

#include "kernels/gemm_kernels.h"

#pragma GCC target("avx2,fma,avx512f")

namespace koi::kernels::avx512 {
namespace {

constexpr int kMr = 12, kNr = 32;

template <bool kRowMajorA>
void tile(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
          bool accumulate) {
  __m512 lo[kMr], hi[kMr];
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) lo[i] = hi[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b + k * ldb), b1 = _mm512_loadu_ps(b + k * ldb + 16);
#pragma GCC unroll 12
    for (int i = 0; i < kMr; ++i) {
      const __m512 ai = _mm512_set1_ps(kRowMajorA ? a[i * lda + k] : a[k * lda + i]);
      lo[i] = _mm512_fmadd_ps(ai, b0, lo[i]);
      hi[i] = _mm512_fmadd_ps(ai, b1, hi[i]);
    }
  }
#pragma GCC unroll 12
  for (int i = 0; i < kMr; ++i) {
    float* row = c + i * ldc;
    if (accumulate) {
      lo[i] = _mm512_add_ps(_mm512_loadu_ps(row), lo[i]);
      hi[i] = _mm512_add_ps(_mm512_loadu_ps(row + 16), hi[i]);
    }
    _mm512_storeu_ps(row, lo[i]);
    _mm512_storeu_ps(row + 16, hi[i]);
  }
}

}  // namespace

GemmKernel gemm_kernel() { return {kMr, kNr, tile<true>, tile<false>}; }

}  // namespace koi::kernels::avx512
