// Internal to src/kernels: the tiled matmul loop and the 256-bit dot kernels shared by the
// SIMD levels. This file is included by ops_avx2.cc, ops_avx512.cc and ops_avx512bf16.cc
// AFTER their `#pragma GCC target`, and everything in it sits in an anonymous namespace: each
// level gets its own copy compiled for its instruction set, so no AVX-512 code can be picked
// by the linker for a caller of the AVX2 level. Include the standard headers before the pragma;
// AVX-512 files define KOI_KERNELS_AVX512 first to get the 512-bit helpers.
//
// A kernel K describes one dot product in steps of K::kStep values:
//   Acc zero(); W load_w(row, step); X load_x(row, step); Acc madd(W, X, Acc);
//   float finish(Acc, w_row, x_row, in)  (horizontal sum + the scalar tail past the last step)
// and the largest tile it supports, kMaxRows x kMaxTokens accumulators.
//
// Determinism: the accumulator of each (row, token) pair sees the same instructions in the same
// order whatever the tile shape, so y[t, o] is bitwise the same for any n_tokens, any split of
// rows across threads, and any tile the pair lands in.
#include <immintrin.h>

#include <array>
#include <cstdint>
#include <utility>

#include "kernels/simd.h"

// GCC 12's AVX-512 intrinsics use _mm256_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593); the warnings are about the system header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace koi::kernels {
namespace {

// Weight rows are contiguous, and a tile consumes R of them at once: while it works, it
// prefetches the next R rows (the next tile's bytes) at the rate it consumes its own, so a
// decode step streams from DRAM without waiting for the hardware prefetcher to ramp up on
// every new group of short rows.
constexpr int64_t kCacheLine = 64;

template <class K, int R, int T>
void matmul_tile(const MatmulArgs& a, int64_t row0, int64_t tok0) {
  const uint8_t* w_rows[R];
  const uint8_t* x_rows[T];
  for (int r = 0; r < R; ++r) w_rows[r] = a.w + (row0 + r) * a.w_row_bytes;
  for (int t = 0; t < T; ++t) x_rows[t] = a.x + (tok0 + t) * a.x_row_bytes;
  typename K::Acc acc[R][T];
  for (int r = 0; r < R; ++r) {
    for (int t = 0; t < T; ++t) acc[r][t] = K::zero();
  }
  const int64_t n_steps = a.in / K::kStep;
  const char* next_tile = reinterpret_cast<const char*>(a.w + (row0 + R) * a.w_row_bytes);
  const int64_t next_lines = R * a.w_row_bytes / kCacheLine;
  const int64_t lines_per_step = n_steps > 0 ? (next_lines + n_steps - 1) / n_steps : 0;
  // Decode tiles of quantized weights (f16/f32 rows are long enough for the hardware), not
  // past the end of the matrix.
  const bool prefetch = T == 1 && (a.type == DType::kQ8_0 || a.type == DType::kQ4_0) && row0 + 2 * R <= a.out;
  for (int64_t step = 0; step < n_steps; ++step) {
    if (prefetch) {
      for (int64_t k = 0; k < lines_per_step; ++k) {
        _mm_prefetch(next_tile + (step * lines_per_step + k) * kCacheLine, _MM_HINT_T0);
      }
    }
    typename K::W w[R];
    for (int r = 0; r < R; ++r) w[r] = K::load_w(w_rows[r], step);
    for (int t = 0; t < T; ++t) {
      typename K::X x = K::load_x(x_rows[t], step);
      for (int r = 0; r < R; ++r) acc[r][t] = K::madd(w[r], x, acc[r][t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    for (int r = 0; r < R; ++r) {
      a.y[(tok0 + t) * a.out + row0 + r] = K::finish(acc[r][t], w_rows[r], x_rows[t], a.in);
    }
  }
}

using TileFn = void (*)(const MatmulArgs&, int64_t, int64_t);

template <class K, size_t... I>
constexpr std::array<TileFn, sizeof...(I)> make_tiles(std::index_sequence<I...>) {
  return {&matmul_tile<K, static_cast<int>(I) / K::kMaxTokens + 1,
                       static_cast<int>(I) % K::kMaxTokens + 1>...};
}

// Tokens are visited in chunks whose activations stay in L2 while a thread's weight rows stream
// through once per chunk; within a chunk each tile reuses its weight registers across tokens.
constexpr int64_t kTokenChunk = 64;

template <class K>
void matmul_rows_with(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  static constexpr auto kTiles =
      make_tiles<K>(std::make_index_sequence<K::kMaxRows * K::kMaxTokens>());
  for (int64_t chunk = 0; chunk < a.n_tokens; chunk += kTokenChunk) {
    const int64_t chunk_end = chunk + kTokenChunk < a.n_tokens ? chunk + kTokenChunk : a.n_tokens;
    for (int64_t row = row_begin; row < row_end; row += K::kMaxRows) {
      const int64_t nr = row_end - row < K::kMaxRows ? row_end - row : K::kMaxRows;
      for (int64_t tok = chunk; tok < chunk_end; tok += K::kMaxTokens) {
        const int64_t nt = chunk_end - tok < K::kMaxTokens ? chunk_end - tok : K::kMaxTokens;
        kTiles[(nr - 1) * K::kMaxTokens + nt - 1](a, row, tok);
      }
    }
  }
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

#ifdef KOI_KERNELS_AVX512  // defined by the files compiled for AVX-512
// Our own reduction: GCC 12's _mm512_reduce_add_ps warns about an uninitialised temporary.
inline float hsum(__m512 v) {
  return hsum(_mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1)));
}
#endif

// Scalar tail of a float dot: values [from, in) of a float weight row against f32 activations.
inline float float_tail(float sum, DType type, const uint8_t* w_row, const uint8_t* x_row,
                        int64_t from, int64_t in) {
  const auto* x = reinterpret_cast<const float*>(x_row);
  for (int64_t i = from; i < in; ++i) sum += float_weight(type, w_row, i) * x[i];
  return sum;
}

// f32 / f16 / bf16 weights against f32 activations, 8 values per step.
template <DType kType, int kRows, int kTokens>
struct Float8Kernel {
  static constexpr int kStep = 8, kMaxRows = kRows, kMaxTokens = kTokens;
  using Acc = __m256;
  using W = __m256;
  using X = __m256;
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t step) {
    if constexpr (kType == DType::kF32) {
      return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + step * kStep);
    } else {
      __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(row) + step);
      if constexpr (kType == DType::kF16) return _mm256_cvtph_ps(h);
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
    }
  }
  static X load_x(const uint8_t* row, int64_t step) {
    return _mm256_loadu_ps(reinterpret_cast<const float*>(row) + step * kStep);
  }
  static Acc madd(W w, X x, Acc acc) { return _mm256_fmadd_ps(w, x, acc); }
  static float finish(Acc acc, const uint8_t* w_row, const uint8_t* x_row, int64_t in) {
    return float_tail(hsum(acc), kType, w_row, x_row, in / kStep * kStep, in);
  }
};

// A weight block ready for the integer dot, with its scale broadcast:
//  - q4_0: its raw nibbles 0..15 (unsigned; the -8 offset comes in through QuantX::corr);
//  - q8_0 with a Dot whose products cannot saturate (VNNI): w as signed bytes, and
//    corr = -128 times the sums of each group of 4 weights, since the activations are then
//    taken as unsigned x + 128: dot(x + 128, w) + corr == dot(x, w) exactly;
//  - q8_0 otherwise (AVX2 maddubs saturates at 16 bits): |w| and w for the sign trick.
struct QuantW {
  __m256i u;
  __m256i sign;  // q8_0: the signed weights
  __m256i corr;  // q8_0 with VNNI
  __m256 d;
};
// An activation block: its values (as x + 128, unsigned, for q8_0 weights with VNNI), the
// scale broadcast and, for q4_0 weights, -8 times the sums of each group of 4 values (the
// int32 lanes of the dot), so that dot(nibbles, x) + corr == dot(nibbles - 8, x) exactly.
struct QuantX {
  __m256i q;
  __m256i corr;
  __m256 d;
};

// q8_0 / q4_0 weights against ActBlockQ8 activations, one block per step. Dot turns unsigned
// and signed bytes into eight int32 partial sums of 4 (exact, so every Dot gives the same
// result and the q4_0 offset trick changes no bit of the output).
template <DType kType, class Dot, int kRows, int kTokens>
struct QuantKernel {
  static constexpr int kStep = 32, kMaxRows = kRows, kMaxTokens = kTokens;
  using Acc = __m256;
  using W = QuantW;
  using X = QuantX;
  static Acc zero() { return _mm256_setzero_ps(); }
  static W load_w(const uint8_t* row, int64_t step) {
    const __m256i zero = _mm256_setzero_si256();
    if constexpr (kType == DType::kQ8_0) {
      const auto* block = reinterpret_cast<const BlockQ8_0*>(row) + step;
      __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->qs));
      const __m256 d = _mm256_set1_ps(_cvtsh_ss(block->d));
      if constexpr (Dot::kWideProducts) {
        __m256i sums = Dot::dot(_mm256_set1_epi8(1), q);
        return {zero, q, _mm256_sub_epi32(zero, _mm256_slli_epi32(sums, 7)), d};
      }
      return {_mm256_sign_epi8(q, q), q, zero, d};
    } else {
      const auto* block = reinterpret_cast<const BlockQ4_0*>(row) + step;
      __m128i packed = _mm_loadu_si128(reinterpret_cast<const __m128i*>(block->qs));
      __m256i nibbles = _mm256_set_m128i(_mm_srli_epi16(packed, 4), packed);
      return {_mm256_and_si256(nibbles, _mm256_set1_epi8(0x0F)), zero, zero, _mm256_set1_ps(_cvtsh_ss(block->d))};
    }
  }
  static X load_x(const uint8_t* row, int64_t step) {
    const auto* block = reinterpret_cast<const ActBlockQ8*>(row) + step;
    __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(block->qs));
    __m256i corr = _mm256_setzero_si256();
    if constexpr (kType == DType::kQ8_0 && Dot::kWideProducts) {
      q = _mm256_xor_si256(q, _mm256_set1_epi8(static_cast<char>(0x80)));  // x + 128 as unsigned
    }
    if constexpr (kType == DType::kQ4_0) {
      corr = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(Dot::dot(_mm256_set1_epi8(1), q), 3));
    }
    return {q, corr, _mm256_set1_ps(block->d)};
  }
  static Acc madd(const W& w, const X& x, Acc acc) {
    __m256i sums;
    if constexpr (kType == DType::kQ8_0 && Dot::kWideProducts) {
      sums = Dot::dot_acc(w.corr, x.q, w.sign);
    } else if constexpr (kType == DType::kQ8_0) {
      sums = Dot::dot(w.u, _mm256_sign_epi8(x.q, w.sign));
    } else {
      sums = Dot::dot_acc(x.corr, w.u, x.q);
    }
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(sums), _mm256_mul_ps(w.d, x.d), acc);
  }
  static float finish(Acc acc, const uint8_t*, const uint8_t*, int64_t) { return hsum(acc); }
};

// Unsigned x signed bytes -> int32 sums of 4 with AVX2 (maddubs cannot saturate here: |w| <= 127
// and |x| <= 127, so a pair sum is at most 2 * 127 * 127 < 32767).
struct MaddubsDot {
  static constexpr bool kWideProducts = false;  // 16-bit pair sums: |u| * |s| must stay small
  static __m256i dot(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
  }
  static __m256i dot_acc(__m256i acc, __m256i u, __m256i s) { return _mm256_add_epi32(acc, dot(u, s)); }
};

}  // namespace
}  // namespace koi::kernels
