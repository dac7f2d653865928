// The AVX-512 sgemm micro-kernel: a 12 x 32 tile of C in 24 zmm accumulators (gemm_tile_inl.h).
#include <immintrin.h>

#include "kernels/gemm_kernels.h"

#pragma GCC target("avx2,fma,avx512f")
#include "kernels/gemm_tile_inl.h"

namespace koi::kernels::avx512 {
namespace {

struct Zmm {
  using T = __m512;
  static constexpr int kWidth = 16;
  static T zero() { return _mm512_setzero_ps(); }
  static T load(const float* p) { return _mm512_loadu_ps(p); }
  static T set1(float x) { return _mm512_set1_ps(x); }
  static T fma(T a, T b, T c) { return _mm512_fmadd_ps(a, b, c); }
  static T add(T a, T b) { return _mm512_add_ps(a, b); }
  static void store(float* p, T v) { _mm512_storeu_ps(p, v); }
};

}  // namespace

GemmKernel gemm_kernel() { return GemmTile<Zmm, 12>::kernel(); }

}  // namespace koi::kernels::avx512
