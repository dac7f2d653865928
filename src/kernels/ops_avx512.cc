// The AVX-512 level (F/BW/DQ/VL/VNNI): 512-bit float dots in tiles of 6 rows x 4 tokens (24
// accumulators of the 32 vector registers) and vpdpbusd integer dots for quantized weights.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/simd.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#define KOI_KERNELS_AVX512
#include "kernels/simd_tiles_inl.h"

namespace koi::kernels::avx512 {
namespace {

// Float tiles of 6 rows x 4 tokens: 24 accumulators, 6 weight vectors and one activation vector
// of the 32 registers. Against 4 x 4, f16 gate/up at 512 tokens, one thread's CPU time
// (kernels_bench, best of 3, loaded Zen 4): 1.5-2x (fewer activation loads and f16 conversions per
// fma); 5 x 5 measured level with it, 8 x 2 and 8 x 3 5-25% slower; decode (6 x 1) unchanged.
constexpr int kRows = 6, kTokens = 4;

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

// vpdpbusd adds the 4 products of each lane into int32 with no intermediate saturation, so q8_0
// weights go in as unsigned w + 128 (w ^ 0x80) against the signed activations.
struct VnniDot {
  static int32_t offset(DType type) { return type == DType::kQ4_0 ? 8 : 128; }
  template <DType kType, class I>
  static DotW<I> prep(I w) {
    if constexpr (kType == DType::kQ8_0) {
      if constexpr (sizeof(I) == 32) return {_mm256_xor_si256(w, _mm256_set1_epi8(-128)), w};
      else return {_mm512_xor_si512(w, _mm512_set1_epi8(-128)), w};
    }
    return {w, w};
  }
  template <DType, class I>
  static I dot(I acc, const DotW<I>& w, I x) {
    if constexpr (sizeof(I) == 32) return _mm256_dpbusd_epi32(acc, w.u, x);
    else return _mm512_dpbusd_epi32(acc, w.u, x);
  }
  // Panels hold q8_0 weights already as w + 128, so a panel tile's words need no prep.
  template <DType, class I>
  static DotW<I> prep_panel(I w) {
    return {w, w};
  }
};

struct Vec512 {
  static constexpr int kLanes = 16;
  using I = __m512i;
  using F = __m512;
  static I iset1(int32_t v) { return _mm512_set1_epi32(v); }
  static I iload(const void* p) { return _mm512_loadu_si512(p); }
  static I isub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I iand(I a, I b) { return _mm512_and_si512(a, b); }
  static I isrl4(I a) { return _mm512_srli_epi16(a, 4); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F fset1(float v) { return _mm512_set1_ps(v); }
  static F fload_f16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void fstore(float* p, F a) { _mm512_storeu_ps(p, a); }
  static I from_halves(const __m256i* h) { return _mm512_inserti64x4(_mm512_castsi256_si512(h[0]), h[1], 1); }
  static F from_halves(const __m256* h) { return _mm512_insertf32x8(_mm512_castps256_ps512(h[0]), h[1], 1); }
};

// Quantized prefill tiles: 2 panels of 16 rows x 5 tokens (10 accumulators, 10 integer sums, each
// activation word broadcast once for 32 rows). Against 1 panel x 6 tokens, gate/up at 512 tokens,
// one thread's CPU time (kernels_bench, best of 5, loaded Zen 4): q8_0 and q4_0 1.25x; 6 tokens
// measured 1-5% slower than 5, 4 tokens 8-12% slower.
constexpr int kQuantPanels = 2, kQuantTokens = 5;
// Small batches over weights that are not packed (PackedMatrix takes the panels at any batch):
// up to kSmallBatchQ8 / kSmallBatchQ4 tokens read the weights as stored,
// kSmallTokens per tile; more pack panels (kernels_bench small_*: the crossover, one core, Zen 4).
constexpr int kSmallTokens = 4;
constexpr int64_t kSmallBatchQ8 = 4, kSmallBatchQ4 = 3;

}  // namespace

void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.type) {
    case DType::kF32: return matmul_rows_with<Float16Kernel<DType::kF32>>(a, row_begin, row_end);
    case DType::kF16: return matmul_rows_with<Float16Kernel<DType::kF16>>(a, row_begin, row_end);
    case DType::kBF16: return matmul_rows_with<Float16Kernel<DType::kBF16>>(a, row_begin, row_end);
    case DType::kQ8_0: return quant_matmul_rows<Vec512, VnniDot, DType::kQ8_0, kQuantPanels, kQuantTokens, kSmallTokens, kSmallBatchQ8>(a, row_begin, row_end);
    case DType::kQ4_0: return quant_matmul_rows<Vec512, VnniDot, DType::kQ4_0, kQuantPanels, kQuantTokens, kSmallTokens, kSmallBatchQ4>(a, row_begin, row_end);
    default: return;  // the K-quants: kquant.h
  }
}

}  // namespace koi::kernels::avx512
