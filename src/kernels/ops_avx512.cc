// The AVX-512 level (F/BW/DQ/VL/VNNI): 512-bit float dots and vpdpbusd integer dots, in tiles
// of 4 rows x 4 tokens (16 accumulators of the 32 vector registers).
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

#include "kernels/simd.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#define KOI_KERNELS_AVX512
#include "kernels/simd_tiles_inl.h"

namespace koi::kernels::avx512 {
namespace {

constexpr int kRows = 4, kTokens = 4;

// f32 / f16 / bf16 weights against f32 activations, 16 values per step.
template <DType kType>
struct Float16Kernel {
  static constexpr int kStep = 16, kMaxRows = kRows, kMaxTokens = kTokens;
  using Acc = __m512;
  using W = __m512;
  using X = __m512;
  static Acc zero() { return _mm512_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t step) {
    if constexpr (kType == DType::kF32) {
      return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + step * kStep);
    } else {
      __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row) + step);
      if constexpr (kType == DType::kF16) return _mm512_cvtph_ps(h);
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
  }
  static X load_x(const uint8_t* row, int64_t step) {
    return _mm512_loadu_ps(reinterpret_cast<const float*>(row) + step * kStep);
  }
  static Acc madd(W w, X x, Acc acc) { return _mm512_fmadd_ps(w, x, acc); }
  static float finish(Acc acc, const uint8_t* w_row, const uint8_t* x_row, int64_t in) {
    return float_tail(hsum(acc), kType, w_row, x_row, in / kStep * kStep, in);
  }
};

struct VnniDot {
  static constexpr bool kWideProducts = true;  // products go straight into int32 lanes
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
  }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }
};

template <DType kType>
using QuantK = QuantKernel<kType, VnniDot, kRows, kTokens>;

}  // namespace

void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.type) {
    case DType::kF32: return matmul_rows_with<Float16Kernel<DType::kF32>>(a, row_begin, row_end);
    case DType::kF16: return matmul_rows_with<Float16Kernel<DType::kF16>>(a, row_begin, row_end);
    case DType::kBF16: return matmul_rows_with<Float16Kernel<DType::kBF16>>(a, row_begin, row_end);
    case DType::kQ8_0: return matmul_rows_with<QuantK<DType::kQ8_0>>(a, row_begin, row_end);
    case DType::kQ4_0: return matmul_rows_with<QuantK<DType::kQ4_0>>(a, row_begin, row_end);
  }
}

}  // namespace koi::kernels::avx512
