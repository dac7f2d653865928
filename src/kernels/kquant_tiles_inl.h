// Internal to src/kernels: the K-quant matmul loop shared by the SIMD levels (kquant.h states the
// contract). Included by kquant_avx2.cc and kquant_avx512.cc AFTER their `#pragma GCC target`;
// everything sits in an anonymous namespace, so each level gets its own copy compiled for its
// instruction set (as simd_tiles_inl.h).
//
// Decode and batches under 8 tokens: 8 weight rows at a time, read as stored. A row's super-block
// is unpacked once into 8 vectors of 32 quants (unsigned bytes) and their int16 sub-block scales,
// then dotted with each token of the batch: maddubs (u8 x s8 into int16 pair sums: at most
// 63 * 127 * 2, no saturation) and a multiply-add by the scales into int32 lanes (D::madd: madd +
// add at AVX2, vpdpwssd at AVX-512). The correction terms (q4_K/q5_K mins, q6_K's offset of 32)
// come from the activation block's bsums. The 8 rows' sums are reduced together into one vector
// (lane = row) and the contract's float steps run for the 8 rows side by side. All integer sums
// are exact, so y is bitwise ref::kquant_dot's.
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

// One weight super-block, unpacked. q[v] holds values 32v..32v+31 (bytes 0..63, the q6_K quants
// offset by +32); sc[v] the int16 scale of each of its 16 pair sums; corr the int16 factor of
// each of the activation block's 16 bsums in the correction term.
struct Unpacked {
  __m256i q[8];
  __m256i sc[8];
  __m256i corr;
  float d, dmin;
  uint32_t d_dmin_f16;  // d (low 16 bits) and dmin (high 16 bits; q6_K: 0) as stored
};

inline __m256i srl16(__m256i v, int n) { return _mm256_srl_epi16(v, _mm_cvtsi32_si128(n)); }

// The byte shuffle that copies int16 word k of each 128-bit half into all words of that half.
inline __m256i broadcast_word(int k) { return _mm256_set1_epi16(static_cast<int16_t>((2 * k) | ((2 * k + 1) << 8))); }

template <DType kType>
__attribute__((always_inline)) inline void unpack(const uint8_t* row, int64_t b, Unpacked& u) {
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  if constexpr (kType == DType::kQ6_K) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(row) + b;
    const __m256i two = _mm256_set1_epi8(0x03);
    // The 16 int8 scales, even ones then odd ones, as int16 words: word v of the low 128 bits is
    // scale 2v, of the high 128 bits scale 2v + 1, so one byte shuffle per vector broadcasts both.
    const __m128i scale_bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w->scales));
    const __m256i scales_eo = _mm256_cvtepi8_epi16(
        _mm_shuffle_epi8(scale_bytes, _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15)));
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
        u.sc[v] = _mm256_shuffle_epi8(scales_eo, broadcast_word(v));
      }
    }
    u.corr = _mm256_slli_epi16(_mm256_cvtepi8_epi16(scale_bytes), 5);  // 32 * sc
    u.d = _cvtsh_ss(w->d);
    u.dmin = 0.0f;
    u.d_dmin_f16 = w->d;
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
    const __m256i wide = _mm256_cvtepu8_epi16(_mm_setr_epi32(static_cast<int>(sm[0]), static_cast<int>(sm[1]), static_cast<int>(sm[2]), static_cast<int>(sm[3])));
    const __m128i scales = _mm256_castsi256_si128(wide), mins = _mm256_extracti128_si256(wide, 1);
    const __m256i scales2 = _mm256_broadcastsi128_si256(scales);
    for (int j = 0; j < 8; ++j) {
      // Bytes 2j, 2j + 1 (int16 lane j) into every lane.
      u.sc[j] = _mm256_shuffle_epi8(scales2, broadcast_word(j));
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
    u.d_dmin_f16 = w->d | static_cast<uint32_t>(w->dmin) << 16;
  }
}

// The decode path (fewer tokens than the prefill panels take): up to kKDecodeMaxTokens tokens,
// kKDecodeRows weight rows at a time.
constexpr int kKDecodeMaxTokens = 7;
constexpr int kKDecodeRows = 8;

// The 8 int32 partial sums of one super-block's dots with one token (sum them for the isum).
// Two accumulators halve the chain of dependent multiply-adds.
template <class D>
__attribute__((always_inline)) inline __m256i dot_block_with(const Unpacked& u, const BlockQ8_K& x) {
  __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int v = 0; v < 8; ++v) {
    const __m256i xv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs + 32 * v));
    s[v & 1] = D::madd(s[v & 1], _mm256_maddubs_epi16(u.q[v], xv), u.sc[v]);
  }
  return _mm256_add_epi32(s[0], s[1]);
}

// Lane k of the result: the sum of the 8 lanes of v[k].
inline __m256i reduce8(const __m256i* v) {
  const __m256i ab = _mm256_hadd_epi32(_mm256_hadd_epi32(v[0], v[1]), _mm256_hadd_epi32(v[2], v[3]));
  const __m256i cd = _mm256_hadd_epi32(_mm256_hadd_epi32(v[4], v[5]), _mm256_hadd_epi32(v[6], v[7]));
  // ab holds v[0..3]'s sums over their low 128 bits, then over their high 128 bits.
  return _mm256_add_epi32(_mm256_permute2x128_si256(ab, cd, 0x20), _mm256_permute2x128_si256(ab, cd, 0x31));
}

// y for rows [row0, row0 + nr) (nr <= kKDecodeRows) and tokens [tok0, tok0 + T). Lane r of the
// sums belongs to row r (lanes past nr repeat the last row), so one super-block's isums and
// correction sums of all rows are reduced together and the contract's float steps run for the
// rows side by side, in the contract's order.
template <class D, DType kType, int T>
__attribute__((noinline)) void kquant_decode_tile(const MatmulArgs& a, int64_t row0, int nr, int64_t tok0) {
  const int64_t n_blocks = a.in / kQK_K, block_bytes = a.w_row_bytes / n_blocks;
  const uint8_t* rows[kKDecodeRows];
  for (int r = 0; r < kKDecodeRows; ++r) rows[r] = a.w + (row0 + std::min(r, nr - 1)) * a.w_row_bytes;
  const BlockQ8_K* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const BlockQ8_K*>(a.x + (tok0 + t) * a.x_row_bytes);
  __m256 acc[T];
  for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
  for (int64_t b = 0; b < n_blocks; ++b) {
    __m256i s[T][kKDecodeRows], c[T][kKDecodeRows];
    alignas(32) uint32_t d_dmin[kKDecodeRows];
    for (int r = 0; r < kKDecodeRows; ++r) {
      // The same block of the next group of rows, a group ahead: the rows are read as 8
      // interleaved streams, which the hardware prefetchers follow poorly.
      const char* next = reinterpret_cast<const char*>(rows[r] + kKDecodeRows * a.w_row_bytes + b * block_bytes);
      for (int64_t line = 0; line < block_bytes; line += 64) _mm_prefetch(next + line, _MM_HINT_T0);
      Unpacked u;
      unpack<kType>(rows[r], b, u);
      d_dmin[r] = u.d_dmin_f16;
      for (int t = 0; t < T; ++t) {
        s[t][r] = dot_block_with<D>(u, x[t][b]);
        c[t][r] = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[t][b].bsums)), u.corr);
      }
    }
    // The rows' d halves, then their dmin halves, converted 8 at a time.
    const __m256i halves = _mm256_permute4x64_epi64(
        _mm256_shuffle_epi8(_mm256_load_si256(reinterpret_cast<const __m256i*>(d_dmin)),
                            _mm256_broadcastsi128_si256(_mm_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15))),
        _MM_SHUFFLE(3, 1, 2, 0));
    const __m256 vd = _mm256_cvtph_ps(_mm256_castsi256_si128(halves));
    const __m256 vdmin = _mm256_cvtph_ps(_mm256_extracti128_si256(halves, 1));
    for (int t = 0; t < T; ++t) {
      const __m256i isum = reduce8(s[t]), corr = reduce8(c[t]);
      const __m256 dx = _mm256_set1_ps(x[t][b].d);
      if constexpr (kType == DType::kQ6_K) {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(isum, corr)), _mm256_mul_ps(vd, dx), acc[t]);
      } else {
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(vd, dx), acc[t]);
        const __m256 dm = _mm256_xor_ps(_mm256_mul_ps(vdmin, dx), _mm256_set1_ps(-0.0f));
        acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(corr), dm, acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(32) float out[kKDecodeRows];
    _mm256_store_ps(out, acc[t]);
    for (int r = 0; r < nr; ++r) a.y[(tok0 + t) * a.out + row0 + r] = out[r];
  }
}

template <class D, DType kType>
void kquant_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  using Tile = void (*)(const MatmulArgs&, int64_t, int, int64_t);
  static constexpr auto kTiles = []<size_t... T>(std::index_sequence<T...>) {
    return std::array<Tile, kKDecodeMaxTokens>{&kquant_decode_tile<D, kType, static_cast<int>(T) + 1>...};
  }(std::make_index_sequence<kKDecodeMaxTokens>());
  for (int64_t row = row_begin; row < row_end; row += kKDecodeRows) {
    const int nr = static_cast<int>(std::min<int64_t>(kKDecodeRows, row_end - row));
    for (int64_t tok = 0; tok < a.n_tokens; tok += kKDecodeMaxTokens) {
      kTiles[std::min<int64_t>(kKDecodeMaxTokens, a.n_tokens - tok) - 1](a, row, nr, tok);
    }
  }
}

}  // namespace
}  // namespace koi::kernels
