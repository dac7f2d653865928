// Internal to src/kernels: the K-quant matmul loop shared by the SIMD levels (kquant.h states the
// contract). Included by kquant_avx2.cc and kquant_avx512.cc AFTER their `#pragma GCC target`;
// everything sits in an anonymous namespace, so each level gets its own copy compiled for its
// instruction set (as simd_tiles_inl.h).
//
// A weight row's super-block is unpacked once into 8 vectors of 32 quants (unsigned bytes) and
// their int16 sub-block scales, then dotted with every token of a chunk: maddubs (u8 x s8 into
// int16 pair sums: at most 63 * 127 * 2, no saturation) and a multiply-add by the scales into
// int32 lanes (D::madd: madd + add at AVX2, vpdpwssd at AVX-512). The correction terms (q4_K/q5_K
// mins, q6_K's offset of 32) come from the activation block's bsums. All integer sums are exact,
// so y is bitwise ref::kquant_dot's.
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

namespace koi::kernels {
namespace {

inline int32_t hsum_i32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// One weight super-block, unpacked. q[v] holds values 32v..32v+31 (bytes 0..63, the q6_K quants
// offset by +32); sc[v] the int16 scale of each of its 16 pair sums; corr the int16 factor of
// each of the activation block's 16 bsums in the correction term.
struct Unpacked {
  __m256i q[8];
  __m256i sc[8];
  __m256i corr;
  float d, dmin;
};

inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

template <DType kType>
void unpack(const uint8_t* row, int64_t b, Unpacked& u) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (kType == DType::kQ6_K) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(row) + b;
    const __m256i two = _mm256_set1_epi8(0x03);
    for (int h = 0; h < 2; ++h) {
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->ql + 64 * h));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->ql + 64 * h + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->qh + 32 * h));
      const __m256i lows[4] = {_mm256_and_si256(ql0, low4), _mm256_and_si256(ql1, low4),
                               _mm256_and_si256(srl16(ql0, 4), low4), _mm256_and_si256(srl16(ql1, 4), low4)};
      for (int k = 0; k < 4; ++k) {
        const __m256i high = _mm256_slli_epi16(_mm256_and_si256(srl16(qh, 2 * k), two), 4);
        const int v = 4 * h + k;
        u.q[v] = _mm256_or_si256(lows[k], high);
        u.sc[v] = _mm256_set_m128i(_mm_set1_epi16(w->scales[2 * v + 1]), _mm_set1_epi16(w->scales[2 * v]));
      }
    }
    u.corr = _mm256_slli_epi16(
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w->scales))), 5);  // 32 * sc
    u.d = _cvtsh_ss(w->d);
    u.dmin = 0.0f;
  } else {
    using Block = std::conditional_t<kType == DType::kQ4_K, BlockQ4_K, BlockQ5_K>;
    const auto* w = reinterpret_cast<const Block*>(row) + b;
    // The 12 scale bytes rearranged into 8 scale bytes then 8 min bytes with 32-bit word
    // operations (kquant_scale_min's layout, four sub-blocks per word), widened to int16.
    uint32_t word[3], sm[4];
    std::memcpy(word, w->scales, 12);
    constexpr uint32_t kLow6 = 0x3F3F3F3F, kLow4 = 0x0F0F0F0F, kTop2 = 0x03030303;
    sm[0] = word[0] & kLow6;                                          // scales 0..3
    sm[1] = (word[2] & kLow4) | (((word[0] >> 6) & kTop2) << 4);      // scales 4..7
    sm[2] = word[1] & kLow6;                                          // mins 0..3
    sm[3] = ((word[2] >> 4) & kLow4) | (((word[1] >> 6) & kTop2) << 4);  // mins 4..7
    const __m256i wide = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sm)));
    const __m128i scales = _mm256_castsi256_si128(wide), mins = _mm256_extracti128_si256(wide, 1);
    const __m256i scales2 = _mm256_broadcastsi128_si256(scales);
    for (int j = 0; j < 8; ++j) {
      // Bytes 2j, 2j + 1 (int16 lane j) into every lane.
      u.sc[j] = _mm256_shuffle_epi8(scales2, _mm256_set1_epi16(static_cast<int16_t>((2 * j) | ((2 * j + 1) << 8))));
    }
    u.corr = _mm256_set_m128i(_mm_unpackhi_epi16(mins, mins), _mm_unpacklo_epi16(mins, mins));
    for (int g = 0; g < 4; ++g) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->qs + 32 * g));
      u.q[2 * g] = _mm256_and_si256(v, low4);
      u.q[2 * g + 1] = _mm256_and_si256(srl16(v, 4), low4);
    }
    if constexpr (kType == DType::kQ5_K) {
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w->qh));
      const __m256i one = _mm256_set1_epi8(1);
      for (int j = 0; j < 8; ++j) {
        u.q[j] = _mm256_or_si256(u.q[j], _mm256_slli_epi16(_mm256_and_si256(srl16(qh, j), one), 4));
      }
    }
    u.d = _cvtsh_ss(w->d);
    u.dmin = _cvtsh_ss(w->dmin);
  }
}

// Tokens per pass over a thread's rows: their q8_K activations (2.3 KB per token at in = 2048)
// stay in L2 while each super-block is unpacked once per pass.
constexpr int64_t kKQuantTokenChunk = 64;

// The 8 int32 partial sums of one super-block's dots with one token (sum them for the isum).
template <class D>
__m256i dot_block_with(const Unpacked& u, const BlockQ8_K& x) {
  __m256i s = _mm256_setzero_si256();
  for (int v = 0; v < 8; ++v) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * v));
    s = D::madd(s, _mm256_maddubs_epi16(u.q[v], xv), u.sc[v]);
  }
  return s;
}

// Lane k of the result: the sum of the 8 lanes of v[k].
inline __m256i reduce8(const __m256i* v) {
  const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // ab holds v[0..3]'s sums over their low 128 bits, then over their high 128 bits.
  return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

template <class D, DType kType>
void kquant_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  const auto dot_block = [](const Unpacked& u, const BlockQ8_K& x) { return dot_block_with<D>(u, x); };
  const int64_t n_blocks = a.in / kQK_K;
  for (int64_t chunk = 0; chunk < a.n_tokens; chunk += kKQuantTokenChunk) {
    const int64_t nt = std::min(kKQuantTokenChunk, a.n_tokens - chunk);
    const auto* x0 = reinterpret_cast<const BlockQ8_K*>(a.x + chunk * a.x_row_bytes);
    const int64_t x_stride = a.x_row_bytes / int64_t{sizeof(BlockQ8_K)};
    for (int64_t o = row_begin; o < row_end; ++o) {
      const uint8_t* row = a.w + o * a.w_row_bytes;
      float acc[kKQuantTokenChunk];
      std::fill(acc, acc + nt, 0.0f);
      for (int64_t b = 0; b < n_blocks; ++b) {
        Unpacked u;
        unpack<kType>(row, b, u);
        int64_t t = 0;
        // Eight tokens at a time: their sums reduced into the lanes of one vector, then the
        // contract's float steps lane by lane (the same operations as the scalar tail below).
        for (; t + 8 <= nt; t += 8) {
          __m256i s[8], c[8];
          alignas(32) float xd[8];
          for (int k = 0; k < 8; ++k) {
            const BlockQ8_K& x = x0[(t + k) * x_stride + b];
            s[k] = dot_block(u, x);
            c[k] = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)), u.corr);
            xd[k] = x.d;
          }
          const __m256i isum = reduce8(s), corr = reduce8(c);
          const __m256 dx = _mm256_load_ps(xd);
          __m256 y = _mm256_loadu_ps(acc + t);
          if constexpr (kType == DType::kQ6_K) {
            y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, corr)), _mm256_mul_ps(_mm256_set1_ps(u.d), dx), y);
          } else {
            y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(_mm256_set1_ps(u.d), dx), y);
            const __m256 dm = _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(u.dmin), dx), _mm256_set1_ps(-0.0f));
            y = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), dm, y);
          }
          _mm256_storeu_ps(acc + t, y);
        }
        for (; t < nt; ++t) {
          const BlockQ8_K& x = x0[t * x_stride + b];
          const int32_t isum = hsum_i32(dot_block(u, x));
          const int32_t corr =
              hsum_i32(_mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.bsums)), u.corr));
          if constexpr (kType == DType::kQ6_K) {
            acc[t] = std::fma(static_cast<float>(isum - corr), u.d * x.d, acc[t]);
          } else {
            acc[t] = std::fma(static_cast<float>(isum), u.d * x.d, acc[t]);
            acc[t] = std::fma(static_cast<float>(corr), -(u.dmin * x.d), acc[t]);
          }
        }
      }
      for (int64_t t = 0; t < nt; ++t) a.y[(chunk + t) * a.out + o] = acc[t];
    }
  }
}

}  // namespace
}  // namespace koi::kernels
