// The AVX2 level of the K-quant matmul. Decode (kquant_tiles_inl.h): maddubs, then madd + add by
// the sub-block scales. Prefill panels (kquant_panel_inl.h), 8 rows per vector: maddubs of the
// unsigned quants by a broadcast activation word (pair sums at most 2 * 63 * 128, no
// saturation), then madd by the (sc, sc) pair of the row into the token's int32 sum.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/kquant.h"

#pragma GCC target("avx2,fma,f16c")
#include "kernels/kquant_tiles_inl.h"
#include "kernels/kquant_panel_inl.h"

namespace koi::kernels::avx2 {
namespace {

struct MaddScaled {
  static __m256i madd(__m256i acc, __m256i pairs, __m256i scales) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
  }
};

struct PanelAvx2 {
  using Decode = MaddScaled;
  static constexpr int kLanes = 8, kPanelTokens = 4;
  using I = __m256i;
  using F = __m256;
  static I izero() { return _mm256_setzero_si256(); }
  static I iload(const int32_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
  static I isub(I a, I b) { return _mm256_sub_epi32(a, b); }
  // isum[t] += sc * (dot of the W quant words at w with the words xw[t][0..W)).
  template <int W, int T>
  static void sub_block(I* isum, const int32_t* w, const int32_t* const* xw, const int32_t* sc_pairs) {
    const I sc = iload(sc_pairs);
    for (int k = 0; k < W; ++k) {
      const I q = iload(w + k * kLanes);
      for (int t = 0; t < T; ++t) {
        const I pairs = _mm256_maddubs_epi16(q, _mm256_set1_epi32(xw[t][k]));
        isum[t] = _mm256_add_epi32(isum[t], _mm256_madd_epi16(pairs, sc));
      }
    }
  }
  static I corr(I acc, I pairs, int32_t word) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi32(word)));
  }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F fset1(float v) { return _mm256_set1_ps(v); }
  static F fload(const float* p) { return _mm256_loadu_ps(p); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F neg(F a) { return _mm256_xor_ps(a, _mm256_set1_ps(-0.0f)); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void fstore(float* p, F a) { _mm256_storeu_ps(p, a); }
};

// The largest lane of v.
float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  return _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
}

}  // namespace

void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  kquant_rows_of_type<PanelAvx2>(a, row_begin, row_end);
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    __m256 vmax = _mm256_setzero_ps();
    // max(|x|, vmax) returns vmax for a NaN |x|: NaNs are skipped, as by the scalar '>'.
    for (int i = 0; i < kQK_K; i += 8) vmax = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(xb + i)), vmax);
    const float amax = hmax(vmax);
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    int first = 0;  // the first value of that magnitude: the one the scalar loop keeps
    while (std::fabs(xb[first]) != amax) ++first;
    const float iscale = -127.0f / xb[first];
    const __m256 vscale = _mm256_set1_ps(iscale);
    for (int i = 0; i < kQK_K; i += 32) {
      __m256i q[4];
      for (int k = 0; k < 4; ++k) {
        const __m256 v = _mm256_mul_ps(vscale, _mm256_loadu_ps(xb + i + 8 * k));
        const __m256i r = _mm256_cvtps_epi32(_mm256_round_ps(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
        // The scalar code's min(127, q) and its int8 cast, which keeps the low byte (of the
        // integer a NaN converts to, too).
        q[k] = _mm256_and_si256(_mm256_min_epi32(r, _mm256_set1_epi32(127)), _mm256_set1_epi32(0xFF));
      }
      // The packs (of bytes 0..255, no saturation) interleave 4-value groups within 128-bit
      // lanes; the permute restores the order.
      const __m256i bytes = _mm256_packus_epi16(_mm256_packus_epi32(q[0], q[1]), _mm256_packus_epi32(q[2], q[3]));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[b].qs + i),
                          _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    }
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * g + i];
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace koi::kernels::avx2
