// Internal to src/kernels: the sgemm micro-kernel body shared by the SIMD levels
// (gemm_kernels.h says what a tile computes). A level's file sets its target pragma, defines
// a vector type V (float lanes: kWidth, zero, load, set1, fma, add, store) and instantiates
// GemmTile<V, MR> for a tile of MR rows x 2 vectors: 2 MR accumulators, per k two loads of B
// and MR broadcasts of A.
#pragma once

#include <cstdint>

namespace koi::kernels {

template <typename V, int kMr>
struct GemmTile {
  static constexpr int kNr = 2 * V::kWidth;

  template <bool kRowMajorA>
  static void run(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                  bool accumulate) {
    typename V::T lo[kMr], hi[kMr];
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) lo[i] = hi[i] = V::zero();
    for (int64_t k = 0; k < K; ++k) {
      const typename V::T b0 = V::load(b + k * ldb), b1 = V::load(b + k * ldb + V::kWidth);
#pragma GCC unroll 16
      for (int i = 0; i < kMr; ++i) {
        const typename V::T ai = V::set1(kRowMajorA ? a[i * lda + k] : a[k * lda + i]);
        lo[i] = V::fma(ai, b0, lo[i]);
        hi[i] = V::fma(ai, b1, hi[i]);
      }
    }
#pragma GCC unroll 16
    for (int i = 0; i < kMr; ++i) {
      float* row = c + i * ldc;
      if (accumulate) {
        lo[i] = V::add(V::load(row), lo[i]);
        hi[i] = V::add(V::load(row + V::kWidth), hi[i]);
      }
      V::store(row, lo[i]);
      V::store(row + V::kWidth, hi[i]);
    }
  }

  static GemmKernel kernel() { return {kMr, kNr, run<true>, run<false>}; }
};

}  // namespace koi::kernels
