// The AVX2 sgemm micro-kernel: a 6 x 16 tile of C in 12 ymm accumulators (gemm_tile_inl.h).
#include <immintrin.h>

#include "kernels/gemm_kernels.h"

#pragma GCC target("avx2,fma")
#include "kernels/gemm_tile_inl.h"

namespace koi::kernels::avx2 {
namespace {

struct Ymm {
  using T = __m256;
  static constexpr int kWidth = 8;
  static T zero() { return _mm256_setzero_ps(); }
  static T load(const float* p) { return _mm256_loadu_ps(p); }
  static T set1(float x) { return _mm256_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm256_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm256_add_ps(a, b); }
  static void store(float* p, T v) { _mm256_storeu_ps(p, v); }
};

}  // namespace

GemmKernel gemm_kernel() { return GemmTile<Ymm, 6>::kernel(); }

}  // namespace koi::kernels::avx2
