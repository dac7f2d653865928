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

}  // namespace

void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  kquant_rows_of_type<PanelAvx2>(a, row_begin, row_end);
}

}  // namespace koi::kernels::avx2
