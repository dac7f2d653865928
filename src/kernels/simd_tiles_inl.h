// Internal to src/kernels: the tiled matmul loops shared by the SIMD levels (float weights below,
// quantized weights further down). This file is included by ops_avx2.cc, ops_avx512.cc and ops_avx512bf16.cc
// AFTER their `#pragma GCC target`, and everything in it sits in an anonymous namespace: each
// level gets its own copy compiled for its instruction set, so no AVX-512 code can be picked
// by the linker for a caller of the AVX2 level. Include the standard headers before the pragma;
// AVX-512 files define KOI_KERNELS_AVX512 first to get the 512-bit helpers.
//
// Float weights (f32, f16, bf16): a kernel K describes one dot product in steps of K::kStep values:
//   Acc zero(); W load_w(row, step); X load_x(row, step); Acc madd(W, X, Acc);
//   float finish(Acc, w_row, x_row, in)  (horizontal sum + the scalar tail past the last step)
// and the largest tile it supports, kMaxRows x kMaxTokens accumulators.
//
// Determinism: the accumulator of each (row, token) pair sees the same instructions in the same
// order whatever the tile shape, so y[t, o] is bitwise the same for any n_tokens, any split of
// rows across threads, and any tile the pair lands in.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/simd.h"

// GCC 12's AVX-512 intrinsics use _mm256_undefined_*() temporaries that -Wuninitialized reports
// once inlined (GCC bug 105593); the warnings are about the system header, not this code.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// DotW<__m256i> drops the vector type's alignment attribute as a template argument; harmless.
#pragma GCC diagnostic ignored "-Wignored-attributes"

namespace koi::kernels {
namespace {

// Decode tiles (one token; quantized: also the first token tile of a small batch, and the panel
// pack) read their R weight rows side by side, each too short (2-11 KB) for the hardware
// prefetcher to ramp up before the tile moves on. So such a tile prefetches the next tile's rows
// into L2 at the rate it consumes its own. Into L2, not L1: tiles are 16-45 KB, and prefetching
// them into the 32 KB L1 evicted the lines being read (f16 generation went from 0.69x to 1.01x
// llama.cpp's, bench/README.md). The quantized panel tiles are the exception (Into::kL1): their
// next row group goes into L1 as well. There, T1's prefetches held up the tile (14% of its samples
// sat on the instruction after one), and T0 made the 32-sequence q8_0 step about 6% faster with
// decode and pp512 unchanged (bench/README.md, stop 29).
constexpr int64_t kCacheLine = 64;

class TilePrefetch {
 public:
  // streaming: the tile is the first to read its rows in this call (decode; the first token tile
  // of a small batch).
  TilePrefetch(const MatmulArgs& a, int64_t row0, int64_t rows, int64_t n_steps, bool streaming)
      : TilePrefetch(reinterpret_cast<const char*>(a.w + (row0 + rows) * a.w_row_bytes), rows * a.w_row_bytes,
                     n_steps, streaming && row0 + 2 * rows <= a.out) {}
  enum class Into { kL2, kL1 };
  // `bytes` from `next` on, spread over n_steps steps when `on`.
  TilePrefetch(const char* next, int64_t bytes, int64_t n_steps, bool on, Into into = Into::kL2)
      : next_(next),
        lines_per_step_(on && n_steps > 0 ? (bytes / kCacheLine + n_steps - 1) / n_steps : 0),
        into_l1_(into == Into::kL1) {}
  void step(int64_t s) const {
    for (int64_t k = 0; k < lines_per_step_; ++k) {
      const char* line = next_ + (s * lines_per_step_ + k) * kCacheLine;
      if (into_l1_) {
        _mm_prefetch(line, _MM_HINT_T0);
      } else {
        _mm_prefetch(line, _MM_HINT_T1);
      }
    }
  }

 private:
  const char* next_;
  int64_t lines_per_step_;
  bool into_l1_;
};

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
  const TilePrefetch prefetch(a, row0, R, n_steps, a.n_tokens == 1);
  for (int64_t step = 0; step < n_steps; ++step) {
    prefetch.step(step);
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

// Quantized weights (q8_0, q4_0) against ActBlockQ8 activations. Every level and every tile
// computes, for weight row o and token t, the same float sequence over the blocks b in order:
//   y = 0;  y = fma(float(isum(o, t, b)), wd(o, b) * xd(t, b), y)
// where isum is the exact integer dot of the block's 32 weights and 32 activation bytes (at most
// 32 * 128 * 127 in magnitude, so its conversion to float is exact too). How an isum is
// obtained (instruction, lane layout, order of the integer adds) changes no bit of y: decode and
// prefill, AVX2 and AVX-512 give bitwise equal results.
//
// The integer dot takes unsigned weight bytes u = w + c against signed activations and
// subtracts c * sum(x); q4_0 nibbles are w + 8 as stored. A level supplies, as class D:
//   static int32_t offset(DType)                  c for the type
//   template <DType, class I> DotW<I> prep(I w)   w: q4_0 nibbles (0..15) or q8_0 signed bytes
//   template <DType, class I> I dot(I acc, const DotW<I>& w, I x)
//       acc + in each int32 lane, the sum of the 4 products of the lane's bytes (exact)
//   template <DType, class I> DotW<I> prep_panel(I w)     prep for words read from a panel (q8_0
//                                                         bytes there are w + 128, see pack_panel)
// for I = __m256i and the level's vector V::I, and a vector type V (kLanes int32/f32 lanes):
//   I iset1(int32_t); I iload(const void*); I isub(I, I); I iand(I, I); I isrl4(I)  (bytes >> 4)
//   F cvt(I); F fset1(float); F fload_f16(const uint16_t*); F mul(F, F); F fmadd(F, F, F);
//   void fstore(float*, F); I from_halves(const __m256i*); F from_halves(const __m256*)
template <class I>
struct DotW {
  I u;  // w + offset, unsigned
  I s;  // the signed weights, for levels that need them (the AVX2 sign trick)
};

template <DType kType>
struct QuantBlock {
  using Block = std::conditional_t<kType == DType::kQ8_0, BlockQ8_0, BlockQ4_0>;
  static constexpr int kWords = sizeof(Block::qs) / 4;  // 32-bit words of weight bytes per block

  static const Block* block(const uint8_t* row, int64_t b) { return reinterpret_cast<const Block*>(row) + b; }
  // Block b of two rows: values 0..15 (lo) and 16..31 (hi) of row ra in the low 128 bits and of
  // row rb in the high 128 bits; q8_0 as signed bytes, q4_0 as nibbles 0..15.
  static void load_pair(const uint8_t* ra, const uint8_t* rb, int64_t b, __m256i& lo, __m256i& hi) {
    const auto* qa = reinterpret_cast<const __m128i*>(block(ra, b)->qs);
    const auto* qb = reinterpret_cast<const __m128i*>(block(rb, b)->qs);
    if constexpr (kType == DType::kQ8_0) {
      lo = _mm256_loadu2_m128i(qb, qa);
      hi = _mm256_loadu2_m128i(qb + 1, qa + 1);
    } else {
      const __m256i packed = _mm256_loadu2_m128i(qb, qa);
      lo = _mm256_and_si256(packed, _mm256_set1_epi8(0x0F));
      hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), _mm256_set1_epi8(0x0F));
    }
  }
  // The scales of block b of 8 rows from row0, stride bytes apart (offsets: i * stride), as f32.
  // q8_0 takes them with one gather, q4_0 one by one: each measured 1.5x faster than the other
  // way for its type in decode (one core, Zen 4), for reasons the profile did not show.
  static __m256 scales8(const uint8_t* row0, int64_t stride, int64_t b, __m256i offsets) {
    if constexpr (kType == DType::kQ8_0) {
      const __m256i words = _mm256_and_si256(
          _mm256_i32gather_epi32(reinterpret_cast<const int*>(block(row0, b)), offsets, 1), _mm256_set1_epi32(0xFFFF));
      return _mm256_cvtph_ps(_mm_packus_epi32(_mm256_castsi256_si128(words), _mm256_extracti128_si256(words, 1)));
    } else {
      alignas(16) uint16_t d[8];
      for (int r = 0; r < 8; ++r) d[r] = block(row0 + r * stride, b)->d;
      return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(d)));
    }
  }
};

// The 8 row sums of p[i] = [4 partial sums of row i | 4 of row i + 4], i < 4, in row order.
inline __m256i reduce_pairs(const __m256i* p) {
  return _mm256_hadd_epi32(_mm256_hadd_epi32(p[0], p[1]), _mm256_hadd_epi32(p[2], p[3]));
}

struct Vec256 {
  static constexpr int kLanes = 8;
  using I = __m256i;
  using F = __m256;
  static I iset1(int32_t v) { return _mm256_set1_epi32(v); }
  static I iload(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static I isub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I iand(I a, I b) { return _mm256_and_si256(a, b); }
  static I isrl4(I a) { return _mm256_srli_epi16(a, 4); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F fset1(float v) { return _mm256_set1_ps(v); }
  static F fload_f16(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
  static F mul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fmadd(F a, F b, F c) { return _mm256_fmadd_ps(a, b, c); }
  static void fstore(float* p, F a) { _mm256_storeu_ps(p, a); }
  static I from_halves(const __m256i* h) { return h[0]; }
  static F from_halves(const __m256* h) { return h[0]; }
};

// Decode and small batches (T tokens, 1 <= T <= a few): kLanes rows read as stored, the block
// dots of two rows in one 256-bit vector (4 partial sums each), reduced to one isum per lane. Each
// weight vector is loaded once per block and used for all T tokens; the reduction is paid per
// token, which is why larger batches take the panel path below. w points at the tile's first row
// and the rows are w_row_bytes apart (quant_matmul_rows copies a last, partial tile to a full one).
template <class V, class D, DType kType, int T>
__attribute__((noinline)) void quant_rows_tile(const MatmulArgs& a, const uint8_t* w, int64_t row0, int64_t tok0) {
  using Q = QuantBlock<kType>;
  constexpr int L = V::kLanes;
  const int64_t stride = a.w_row_bytes;
  const auto row = [&](int r) { return w + r * stride; };
  const __m256i offsets = _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                             _mm256_set1_epi32(static_cast<int32_t>(stride)));
  const ActBlockQ8* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const ActBlockQ8*>(a.x + (tok0 + t) * a.x_row_bytes);
  const int64_t n_blocks = a.in / 32;
  const TilePrefetch prefetch(a, row0, L, n_blocks, tok0 == 0);
  typename V::F acc[T];
  for (int t = 0; t < T; ++t) acc[t] = V::fset1(0.0f);
  for (int64_t b = 0; b < n_blocks; ++b) {
    prefetch.step(b);
    __m256i x_lo[T], x_hi[T];
    for (int t = 0; t < T; ++t) {
      const auto* xq = reinterpret_cast<const __m128i*>(x[t][b].qs);
      x_lo[t] = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq));
      x_hi[t] = _mm256_broadcastsi128_si256(_mm_loadu_si128(xq + 1));
    }
    __m256i sums[T][L / 8];
    __m256 scales[L / 8];
    for (int g = 0; g < L / 8; ++g) {
      __m256i partial[T][4];
      for (int i = 0; i < 4; ++i) {
        __m256i lo, hi;
        Q::load_pair(row(8 * g + i), row(8 * g + i + 4), b, lo, hi);
        const DotW<__m256i> w_lo = D::template prep<kType>(lo), w_hi = D::template prep<kType>(hi);
        for (int t = 0; t < T; ++t) {
          partial[t][i] = D::template dot<kType>(_mm256_setzero_si256(), w_lo, x_lo[t]);
          partial[t][i] = D::template dot<kType>(partial[t][i], w_hi, x_hi[t]);
        }
      }
      for (int t = 0; t < T; ++t) sums[t][g] = reduce_pairs(partial[t]);
      scales[g] = Q::scales8(row(8 * g), stride, b, offsets);
    }
    const typename V::F wd = V::from_halves(scales);
    for (int t = 0; t < T; ++t) {
      const auto isum = V::isub(V::from_halves(sums[t]), V::iset1(D::offset(kType) * x[t][b].sum));
      acc[t] = V::fmadd(V::cvt(isum), V::mul(wd, V::fset1(x[t][b].d)), acc[t]);
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(64) float out[L];
    V::fstore(out, acc[t]);
    float* y = a.y + (tok0 + t) * a.out;
    for (int r = 0; r < L && row0 + r < a.out; ++r) y[row0 + r] = out[r];
  }
}

// Batches of more than a few tokens, and every batch when the weights are a PackedMatrix, take the
// panel layout: panels of kPanelRows = 16 rows where, per 32-value block, word row k holds 4-byte
// word k of the 16 rows side by side (q8_0 bytes stored as w + 128, unsigned; q4_0 words as in the
// file: the nibbles of values 4k..4k+3 and 16+4k..16+4k+3), followed by the 16 rows' f16 scales as
// stored. That is the same number of bytes per block as the file. A level with L lanes reads L
// consecutive rows of a word row (AVX-512: a whole panel; AVX2: half of one). Every token's isum
// for the L rows then accumulates in one vector, each 4-byte activation word broadcast once for the
// tile's vectors of rows, with no reduction across lanes. Unpacked weights are packed per call.
constexpr int kPanelRows = 16;
template <DType kType>
constexpr int64_t kPanelBlockWords = QuantBlock<kType>::kWords * kPanelRows + kPanelRows / 2;
template <DType kType>
int64_t panel_words(int64_t n_blocks) {
  return n_blocks * kPanelBlockWords<kType>;
}

// Four vectors of rows (i, i + 4), i < 4 (row i in the low 128 bits), each lane 4 words of its row,
// transposed in place: v[k] becomes word k of rows 0..3 (low half) and 4..7 (high half).
inline void transpose_words(__m256i* v) {
  const __m256i t0 = _mm256_unpacklo_epi32(v[0], v[1]), t1 = _mm256_unpackhi_epi32(v[0], v[1]);
  const __m256i t2 = _mm256_unpacklo_epi32(v[2], v[3]), t3 = _mm256_unpackhi_epi32(v[2], v[3]);
  v[0] = _mm256_unpacklo_epi64(t0, t2);
  v[1] = _mm256_unpackhi_epi64(t0, t2);
  v[2] = _mm256_unpacklo_epi64(t1, t3);
  v[3] = _mm256_unpackhi_epi64(t1, t3);
}

// The panel of rows [row0, row0 + nr) of a.w, rows past nr repeating the last one. Per block and
// group of 8 rows: the weight words by in-register transposes of 4 x 4 words, then the scales. A
// wrong panel shows as a batched result that differs from the scalar reference's or from a
// one-token result on native weights (matmul_test's bitwise tests).
template <DType kType>
void pack_panel(const MatmulArgs& a, int64_t row0, int nr, uint32_t* panel) {
  using Q = QuantBlock<kType>;
  constexpr int kHalves = Q::kWords / 4;  // 128-bit halves of a block's weight bytes: 2 (q8_0), 1 (q4_0)
  const __m256i offset = _mm256_set1_epi8(kType == DType::kQ8_0 ? -128 : 0);  // w + 128 == w ^ 0x80
  const int64_t n_blocks = a.in / 32;
  const uint8_t* rows[kPanelRows];
  for (int r = 0; r < kPanelRows; ++r) rows[r] = a.w + (row0 + (r < nr ? r : nr - 1)) * a.w_row_bytes;
  for (int64_t b = 0; b < n_blocks; ++b) {
    uint32_t* dst = panel + b * kPanelBlockWords<kType>;
    auto* scales = reinterpret_cast<uint16_t*>(dst + Q::kWords * kPanelRows);
    for (int g = 0; g < kPanelRows / 8; ++g) {
      const uint8_t* const* rg = rows + 8 * g;
      for (int h = 0; h < kHalves; ++h) {
        __m256i v[4];
        for (int i = 0; i < 4; ++i) {
          v[i] = _mm256_loadu2_m128i(reinterpret_cast<const __m128i*>(Q::block(rg[i + 4], b)->qs) + h,
                                     reinterpret_cast<const __m128i*>(Q::block(rg[i], b)->qs) + h);
        }
        transpose_words(v);
        for (int k = 0; k < 4; ++k) {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + (4 * h + k) * kPanelRows + 8 * g),
                              _mm256_xor_si256(v[k], offset));
        }
      }
    }
    for (int r = 0; r < kPanelRows; ++r) scales[r] = Q::block(rows[r], b)->d;
  }
}

// One vector of a tile's rows: the panel holding them and the first of their lanes there.
struct PanelRows {
  const uint32_t* panel;
  int lane0;
};

// A tile of P vectors of L rows (w[p]: consecutive rows from row0) x T tokens. Each activation
// word is broadcast once and meets the P vectors' words (AVX-512 takes P = 2: half the broadcasts
// per integer dot of P = 1). nr: the valid rows of the P L. While it computes, the tile fetches
// its share of the next rows (steps step0 + block of `next`), so that streaming the weights from
// memory overlaps the integer dots instead of preceding them.
template <class V, class D, DType kType, int P, int T>
void quant_panel_tile(const MatmulArgs& a, const PanelRows* w, int64_t row0, int nr, int64_t tok0,
                      const TilePrefetch& next, int64_t step0) {
  using Q = QuantBlock<kType>;
  using I = typename V::I;
  constexpr int L = V::kLanes;
  const ActBlockQ8* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const ActBlockQ8*>(a.x + (tok0 + t) * a.x_row_bytes);
  typename V::F acc[P][T];
  for (int p = 0; p < P; ++p) {
    for (int t = 0; t < T; ++t) acc[p][t] = V::fset1(0.0f);
  }
  const int64_t n_blocks = a.in / 32;
  for (int64_t b = 0; b < n_blocks; ++b) {
    next.step(step0 + b);
    const uint32_t* pw[P];  // the block's word row 0 of each vector of rows
    for (int p = 0; p < P; ++p) pw[p] = w[p].panel + b * kPanelBlockWords<kType> + w[p].lane0;
    I isum[P][T];
    for (int t = 0; t < T; ++t) {
      const I init = V::iset1(-D::offset(kType) * x[t][b].sum);
      for (int p = 0; p < P; ++p) isum[p][t] = init;
    }
    auto dot_word = [&](const I* words, int k) {
      DotW<I> dw[P];
      for (int p = 0; p < P; ++p) dw[p] = D::template prep_panel<kType>(words[p]);
      for (int t = 0; t < T; ++t) {
        int32_t word;
        std::memcpy(&word, x[t][b].qs + 4 * k, 4);
        const I xw = V::iset1(word);
        for (int p = 0; p < P; ++p) isum[p][t] = D::template dot<kType>(isum[p][t], dw[p], xw);
      }
    };
    for (int k = 0; k < Q::kWords; ++k) {
      I words[P];
      for (int p = 0; p < P; ++p) words[p] = V::iload(pw[p] + k * kPanelRows);
      if constexpr (kType == DType::kQ8_0) {
        dot_word(words, k);
      } else {
        const I low = V::iset1(0x0F0F0F0F);
        I nibbles[P];
        for (int p = 0; p < P; ++p) nibbles[p] = V::iand(words[p], low);
        dot_word(nibbles, k);
        for (int p = 0; p < P; ++p) nibbles[p] = V::iand(V::isrl4(words[p]), low);
        dot_word(nibbles, k + 4);
      }
    }
    typename V::F wd[P];
    for (int p = 0; p < P; ++p) {
      // The scales follow word row kWords - 1, lane0 halves (not words) into it.
      wd[p] = V::fload_f16(reinterpret_cast<const uint16_t*>(pw[p] - w[p].lane0 + Q::kWords * kPanelRows) + w[p].lane0);
    }
    for (int t = 0; t < T; ++t) {
      const typename V::F xd = V::fset1(x[t][b].d);
      for (int p = 0; p < P; ++p) acc[p][t] = V::fmadd(V::cvt(isum[p][t]), V::mul(wd[p], xd), acc[p][t]);
    }
  }
  for (int p = 0; p < P; ++p) {
    const int rows = std::min(L, nr - p * L);
    for (int t = 0; t < T; ++t) {
      float* y = a.y + (tok0 + t) * a.out + row0 + p * L;
      if (rows == L) {
        V::fstore(y, acc[p][t]);
      } else {
        alignas(64) float out[L];
        V::fstore(out, acc[p][t]);
        for (int r = 0; r < rows; ++r) y[r] = out[r];
      }
    }
  }
}

// Tokens per pass over the rows: each row group is packed (unpacked weights) and read from memory
// once per pass, and the pass's activations are read once per row group (from L2/L3). 512 measured
// 3% faster than 256 at pp512, one core.
constexpr int64_t kQuantTokenChunk = 512;

// Rows [row_begin, row_end) (row_begin a multiple of kPanelRows) through the panel tiles of
// kPanels vectors x up to kMaxT tokens, in groups of whole panels that a tile row covers. The
// panels come from a.panels, or are packed per group and pass into a per-thread buffer.
template <class V, class D, DType kType, int kPanels, int kMaxT>
void quant_panel_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int L = V::kLanes;
  constexpr int kTileRows = kPanels * L;
  constexpr int kGroupRows = std::max(kTileRows, kPanelRows);
  using Tile = void (*)(const MatmulArgs&, const PanelRows*, int64_t, int, int64_t, const TilePrefetch&, int64_t);
  static constexpr auto kTiles = []<size_t... I>(std::index_sequence<I...>) {
    // Tile (p, t) at index (p - 1) kMaxT + t - 1, for P = p vectors of rows and t tokens.
    return std::array<Tile, kPanels * kMaxT>{
        &quant_panel_tile<V, D, kType, static_cast<int>(I) / kMaxT + 1, static_cast<int>(I) % kMaxT + 1>...};
  }(std::make_index_sequence<kPanels * kMaxT>());
  const int64_t n_blocks = a.in / 32;
  const int64_t panel_stride = panel_words<kType>(n_blocks);
  const int64_t group_words = kGroupRows / kPanelRows * panel_stride;
  thread_local std::vector<uint32_t> scratch;
  if (a.panels == nullptr) scratch.resize(static_cast<size_t>(group_words));
  for (int64_t chunk = 0; chunk < a.n_tokens; chunk += kQuantTokenChunk) {
    const int64_t chunk_end = std::min(chunk + kQuantTokenChunk, a.n_tokens);
    const int64_t token_tiles = (chunk_end - chunk + kMaxT - 1) / kMaxT;
    for (int64_t row = row_begin; row < row_end; row += kGroupRows) {
      const int group_rows = static_cast<int>(std::min<int64_t>(kGroupRows, row_end - row));
      const uint32_t* group = a.panels != nullptr ? a.panels + row / kPanelRows * panel_stride : scratch.data();
      if (a.panels == nullptr) {
        for (int q = 0; q * kPanelRows < group_rows; ++q) {
          pack_panel<kType>(a, row + q * kPanelRows, std::min(kPanelRows, group_rows - q * kPanelRows),
                            scratch.data() + q * panel_stride);
        }
      }
      // The next group's weights (its panels, or the rows to pack), spread over this group's tiles.
      const int row_tiles = (group_rows + kTileRows - 1) / kTileRows;
      const bool more = row + kGroupRows < row_end;
      const TilePrefetch next =
          a.panels != nullptr
              ? TilePrefetch(reinterpret_cast<const char*>(group + group_words), group_words * 4,
                             row_tiles * token_tiles * n_blocks, more, TilePrefetch::Into::kL1)
              : TilePrefetch(a, row, kGroupRows, row_tiles * token_tiles * n_blocks, more);
      for (int tile_row = 0; tile_row < group_rows; tile_row += kTileRows) {
        const int nr = std::min(kTileRows, group_rows - tile_row);
        const int vectors = (nr + L - 1) / L;
        PanelRows w[kPanels];
        for (int p = 0; p < vectors; ++p) {
          const int r = tile_row + p * L;
          w[p] = {group + r / kPanelRows * panel_stride, r % kPanelRows};
        }
        // The pass's tokens in token_tiles tiles of sizes that differ by at most one (32 tokens at
        // kMaxT 5: 5 5 5 5 4 4 4, not 5 5 5 5 5 5 2, whose last tile keeps too few dots in flight).
        const int64_t chunk_tokens = chunk_end - chunk;
        for (int64_t tile = 0; tile < token_tiles; ++tile) {
          const int64_t tok = chunk + tile * chunk_tokens / token_tiles;
          const int nt = static_cast<int>(chunk + (tile + 1) * chunk_tokens / token_tiles - tok);
          const int64_t step0 = (tile_row / kTileRows * token_tiles + tile) * n_blocks;
          kTiles[(vectors - 1) * kMaxT + nt - 1](a, w, row + tile_row, nr, tok, next, step0);
        }
      }
    }
  }
}

// Weights as stored (not a PackedMatrix) and up to kSmallBatch tokens take quant_rows_tile
// (kSmallT tokens per tile); everything else the panels. Either way a row tile's weights are read
// from memory once per pass and the token tiles reuse them from cache.
template <class V, class D, DType kType, int kPanels, int kMaxT, int kSmallT, int64_t kSmallBatch>
void quant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int L = V::kLanes;
  if (a.panels != nullptr || a.n_tokens > kSmallBatch) {
    return quant_panel_rows<V, D, kType, kPanels, kMaxT>(a, row_begin, row_end);
  }
  using Tile = void (*)(const MatmulArgs&, const uint8_t*, int64_t, int64_t);
  static constexpr auto kTiles = []<size_t... T>(std::index_sequence<T...>) {
    return std::array<Tile, kSmallT>{&quant_rows_tile<V, D, kType, static_cast<int>(T) + 1>...};
  }(std::make_index_sequence<kSmallT>());
  const auto tokens = [&](const uint8_t* w, int64_t row) {
    for (int64_t tok = 0; tok < a.n_tokens; tok += kSmallT) {
      kTiles[std::min<int64_t>(kSmallT, a.n_tokens - tok) - 1](a, w, row, tok);
    }
  };
  int64_t row = row_begin;
  for (; row + L <= row_end; row += L) tokens(a.w + row * a.w_row_bytes, row);
  if (row < row_end) {
    // The last, partial tile: its rows followed by copies of the last one, as a full tile.
    thread_local std::vector<uint8_t> tile;
    tile.resize(static_cast<size_t>(L * a.w_row_bytes));
    for (int r = 0; r < L; ++r) {
      std::memcpy(tile.data() + r * a.w_row_bytes, a.w + std::min(row + r, row_end - 1) * a.w_row_bytes,
                  static_cast<size_t>(a.w_row_bytes));
    }
    tokens(tile.data(), row);
  }
}

// The AVX2 integer dot: maddubs multiplies unsigned by signed bytes into 16-bit pair sums that
// saturate, so q8_0 takes the sign trick (|w| times x with w's sign: |w| * |x| <= 128 * 127, a
// pair sum fits) with no offset, and q4_0 its nibbles (at most 15 * 127 per product).
struct MaddubsDot {
  static int32_t offset(DType type) { return type == DType::kQ4_0 ? 8 : 0; }
  template <DType kType>
  static DotW<__m256i> prep(__m256i w) {
    if constexpr (kType == DType::kQ8_0) return {_mm256_sign_epi8(w, w), w};
    return {w, w};
  }
  template <DType kType>
  static __m256i dot(__m256i acc, const DotW<__m256i>& w, __m256i x) {
    if constexpr (kType == DType::kQ8_0) x = _mm256_sign_epi8(x, w.s);
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(w.u, x), _mm256_set1_epi16(1)));
  }
  // Panels hold q8_0 weights as w + 128 (VnniDot's operand); the sign trick needs them signed.
  template <DType kType>
  static DotW<__m256i> prep_panel(__m256i w) {
    if constexpr (kType == DType::kQ8_0) w = _mm256_xor_si256(w, _mm256_set1_epi8(-128));
    return prep<kType>(w);
  }
};


}  // namespace
}  // namespace koi::kernels
