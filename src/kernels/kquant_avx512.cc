// The AVX-512 (VNNI) level of the K-quant matmul. Decode (kquant_tiles_inl.h): maddubs, then
// vpdpwssd (int16 pairs times the sub-block scales, added into int32) in one instruction.
// Prefill panels (kquant_panel_inl.h), 16 rows per vector: vpdpbusd of the unsigned quants by a
// broadcast activation word into a sub-block's int32 dot, then one multiply by the row's scale.
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

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
// GCC 12's AVX-512 intrinsics use _mm512_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593, as in simd_tiles_inl.h).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include "kernels/kquant_tiles_inl.h"
#include "kernels/kquant_panel_inl.h"

namespace koi::kernels::avx512 {
namespace {

struct DpwssdScaled {
  static __m256i madd(__m256i acc, __m256i pairs, __m256i scales) { return _mm256_dpwssd_epi32(acc, pairs, scales); }
};

struct PanelAvx512 {
  using Decode = DpwssdScaled;
  static constexpr int kLanes = 16, kPanelTokens = 8;
  using I = __m512i;
  using F = __m512;
  static I izero() { return _mm512_setzero_si512(); }
  static I iload(const int32_t* p) { return _mm512_loadu_si512(p); }
  static I isub(I a, I b) { return _mm512_sub_epi32(a, b); }
  // isum[t] += sc * (dot of the W quant words at w with the words xw[t][0..W)); the dot is at
  // most 32 * 63 * 128 and sc * dot fits int32 (kquant.h), so both steps are exact.
  template <int W, int T>
  static void sub_block(I* isum, const int32_t* w, const int32_t* const* xw, const int32_t* sc_pairs) {
    I dot[T];
    for (int t = 0; t < T; ++t) dot[t] = izero();
    for (int k = 0; k < W; ++k) {
      const I q = iload(w + k * kLanes);
      for (int t = 0; t < T; ++t) dot[t] = _mm512_dpbusd_epi32(dot[t], q, _mm512_set1_epi32(xw[t][k]));
    }
    const I sc = _mm512_srai_epi32(iload(sc_pairs), 16);  // the high int16 of the pair, sign-extended
    for (int t = 0; t < T; ++t) isum[t] = _mm512_add_epi32(isum[t], _mm512_mullo_epi32(dot[t], sc));
  }
  static I corr(I acc, I pairs, int32_t word) { return _mm512_dpwssd_epi32(acc, pairs, _mm512_set1_epi32(word)); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F fset1(float v) { return _mm512_set1_ps(v); }
  static F fload(const float* p) { return _mm512_loadu_ps(p); }
  static F mul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F neg(F a) { return _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(a), _mm512_set1_epi32(INT32_MIN))); }
  static F fmadd(F a, F b, F c) { return _mm512_fmadd_ps(a, b, c); }
  static void fstore(float* p, F a) { _mm512_storeu_ps(p, a); }
};

}  // namespace

void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  kquant_rows_of_type<PanelAvx512>(a, row_begin, row_end);
}

}  // namespace koi::kernels::avx512
