// The fused attention (attention_tiles_inl.h) at the AVX2 level: 8 keys per tile, 8-float vectors.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#pragma GCC target("avx2,fma,f16c")
#include "kernels/attention_tiles_inl.h"
#include "kernels/simd_exp_inl.h"

namespace koi::kernels::avx2 {
namespace {

struct Vec8 {
  using V = __m256;
  // kOutRows (4) x 2 output vectors + 2 value vectors + a broadcast: 11 of 16 registers.
  static constexpr int kWidth = 8, kChunks = 2;
  static V zero() { return _mm256_setzero_ps(); }
  static V load(const float* p) { return _mm256_loadu_ps(p); }
  static void store(float* p, V x) { _mm256_storeu_ps(p, x); }
  static V set1(float x) { return _mm256_set1_ps(x); }
  static V fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
  static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
  static V sub(V a, V b) { return _mm256_sub_ps(a, b); }
  static V keep_first(V x, int n, float fill) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const V keep = _mm256_castsi256_ps(_mm256_cmpgt_epi32(_mm256_set1_epi32(n), lane));
    return _mm256_blendv_ps(_mm256_set1_ps(fill), x, keep);
  }
  static float hmax(V x) {
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    return _mm_cvtss_f32(m);
  }
  static float hsum(V x) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(x), _mm256_extractf128_ps(x, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
  }
  static V exp(V x) { return exp256(x); }
};

}  // namespace

void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items) {
  run_attention_items<Vec8>(a, items);
}

}  // namespace koi::kernels::avx2
