// The fused attention (attention_tiles_inl.h) at the AVX-512 level: 16 keys per tile, 16-float
// vectors.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

// GCC 12's AVX-512 reductions use _mm256_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593), as in simd_tiles_inl.h.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#define KOI_KERNELS_AVX512
#include "kernels/attention_tiles_inl.h"
#include "kernels/simd_exp_inl.h"

namespace koi::kernels::avx512 {
namespace {

struct Vec16 {
  using V = __m512;
  // kOutRows (4) x 4 output vectors + 4 value vectors + a broadcast: 21 of 32 registers.
  static constexpr int kWidth = 16, kChunks = 4;
  static V zero() { return _mm512_setzero_ps(); }
  static V load(const float* p) { return _mm512_loadu_ps(p); }
  static void store(float* p, V x) { _mm512_storeu_ps(p, x); }
  static V set1(float x) { return _mm512_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm512_sub_ps(a, b); }
  static V keep_first(V x, int n, float fill) {
    const auto keep = static_cast<__mmask16>((1u << n) - 1u);
    return _mm512_mask_blend_ps(keep, _mm512_set1_ps(fill), x);
  }
  static float hmax(V x) { return _mm512_reduce_max_ps(x); }
  static float hsum(V x) { return _mm512_reduce_add_ps(x); }
  static V exp(V x) { return exp512(x); }
};

}  // namespace

void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items) {
  run_attention_items<Vec16>(a, items);
}

}  // namespace koi::kernels::avx512
