// Internal to src/kernels: the K-quant prefill path (many tokens), shared by the SIMD levels.
// Included by kquant_avx2.cc and kquant_avx512.cc after kquant_tiles_inl.h (whose unpack() it
// uses), in the same anonymous namespace arrangement: each level gets its own copy.
//
// As the q4_0/q8_0 prefill in simd_tiles_inl.h: a tile of V::kLanes weight rows is first packed
// into a panel where lane r of every vector belongs to row r, so that one token's sums for all
// kLanes rows accumulate in one vector from one 4-byte activation word broadcast per step, with
// no reduction across lanes; each panel vector is loaded once per token tile and used for all
// its T tokens. Per super-block the panel holds, in vectors of kLanes 32-bit words:
//   64 quant words   word k of a row: its values 4k..4k+3 as unsigned bytes (q6_K: q, 0..63)
//   S scale words    S = 8 (q4_K, q5_K) or 16 (q6_K): sub-block j's scale, as the int16 pair
//                    (sc_j, sc_j)
//   8 correction     the int16 pair that multiplies the activation's bsums word i
//     words          (bsums[2i], bsums[2i + 1]): (m_i, m_i) for q4_K/q5_K (the mins),
//                    (32 sc_2i, 32 sc_2i+1) for q6_K (the offset of its quants)
//   2 float words    d and dmin (q6_K: d and 0)
// A level V supplies the integer step (V::sub_block: isum += sc_j * dot_j for T tokens, exact),
// V::corr (acc + the int16 pair products of a word, exact) and the float vector operations; the
// float steps are those of kquant.h's contract in the contract's order, so y is bitwise
// ref::kquant_dot's, as the decode path's is (kquant_matmul_test checks both at every level).

namespace koi::kernels {
namespace {

template <DType kType>
struct KPanel {
  static constexpr int kScales = kType == DType::kQ6_K ? 16 : 8;  // sub-blocks
  static constexpr int kSubWords = 64 / kScales;                   // quant words per sub-block
  static constexpr int kScaleAt = 64, kCorrAt = 64 + kScales, kFloatAt = 72 + kScales;
  static constexpr int kBlockVectors = kFloatAt + 2;
};

inline int32_t int16_pair(int lo, int hi) {
  return static_cast<int32_t>(static_cast<uint16_t>(lo) | (static_cast<uint32_t>(static_cast<uint16_t>(hi)) << 16));
}

// Lane r of super-block b's vectors from row `row` (KPanel's layout; L lanes per vector).
template <DType kType, int L>
void pack_panel_row(const uint8_t* row, int64_t b, int r, int32_t* dst) {
  using P = KPanel<kType>;
  Unpacked u;
  unpack<kType>(row, b, u);
  alignas(32) int32_t words[64];
  for (int v = 0; v < 8; ++v) _mm256_store_si256(reinterpret_cast<__m256i*>(words + 8 * v), u.q[v]);
  for (int k = 0; k < 64; ++k) dst[k * L + r] = words[k];
  if constexpr (kType == DType::kQ6_K) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(row) + b;
    for (int j = 0; j < 16; ++j) dst[(P::kScaleAt + j) * L + r] = int16_pair(w->scales[j], w->scales[j]);
    for (int i = 0; i < 8; ++i) {
      dst[(P::kCorrAt + i) * L + r] = int16_pair(32 * w->scales[2 * i], 32 * w->scales[2 * i + 1]);
    }
  } else {
    using Block = std::conditional_t<kType == DType::kQ4_K, BlockQ4_K, BlockQ5_K>;
    const auto* w = reinterpret_cast<const Block*>(row) + b;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      kquant_scale_min(w->scales, j, &sc, &m);
      dst[(P::kScaleAt + j) * L + r] = int16_pair(sc, sc);
      dst[(P::kCorrAt + j) * L + r] = int16_pair(m, m);
    }
  }
  float f[2] = {u.d, u.dmin};
  std::memcpy(dst + P::kFloatAt * L + r, &f[0], 4);
  std::memcpy(dst + (P::kFloatAt + 1) * L + r, &f[1], 4);
}

// The panel of rows [row0, row0 + nr) of a, lanes past nr repeating the last row.
template <DType kType, int L>
void pack_kpanel(const MatmulArgs& a, int64_t row0, int nr, int32_t* panel) {
  const int64_t n_blocks = a.in / kQK_K;
  for (int r = 0; r < L; ++r) {
    const uint8_t* row = a.w + (row0 + std::min(r, nr - 1)) * a.w_row_bytes;
    for (int64_t b = 0; b < n_blocks; ++b) {
      pack_panel_row<kType, L>(row, b, r, panel + b * KPanel<kType>::kBlockVectors * L);
    }
  }
}

// y for the panel's rows and tokens [tok0, tok0 + T).
template <class V, DType kType, int T>
__attribute__((noinline)) void kpanel_tile(const MatmulArgs& a, const int32_t* panel, int64_t row0, int nr,
                                           int64_t tok0) {
  using P = KPanel<kType>;
  using I = typename V::I;
  using F = typename V::F;
  constexpr int L = V::kLanes;
  const BlockQ8_K* x[T];
  for (int t = 0; t < T; ++t) x[t] = reinterpret_cast<const BlockQ8_K*>(a.x + (tok0 + t) * a.x_row_bytes);
  F acc[T];
  for (int t = 0; t < T; ++t) acc[t] = V::fset1(0.0f);
  const int64_t n_blocks = a.in / kQK_K;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const int32_t* p = panel + b * P::kBlockVectors * L;
    I isum[T], corr[T];
    for (int t = 0; t < T; ++t) isum[t] = V::izero(), corr[t] = V::izero();
    for (int j = 0; j < P::kScales; ++j) {
      const int32_t* xw[T];
      for (int t = 0; t < T; ++t) xw[t] = reinterpret_cast<const int32_t*>(x[t][b].qs) + j * P::kSubWords;
      V::template sub_block<P::kSubWords, T>(isum, p + j * P::kSubWords * L, xw, p + (P::kScaleAt + j) * L);
    }
    for (int i = 0; i < 8; ++i) {
      const I c = V::iload(p + (P::kCorrAt + i) * L);
      for (int t = 0; t < T; ++t) {
        int32_t word;
        std::memcpy(&word, x[t][b].bsums + 2 * i, 4);
        corr[t] = V::corr(corr[t], c, word);
      }
    }
    const F d = V::fload(reinterpret_cast<const float*>(p + P::kFloatAt * L));
    for (int t = 0; t < T; ++t) {
      const F dx = V::fset1(x[t][b].d);
      if constexpr (kType == DType::kQ6_K) {
        acc[t] = V::fmadd(V::cvt(V::isub(isum[t], corr[t])), V::mul(d, dx), acc[t]);
      } else {
        const F dmin = V::fload(reinterpret_cast<const float*>(p + (P::kFloatAt + 1) * L));
        acc[t] = V::fmadd(V::cvt(isum[t]), V::mul(d, dx), acc[t]);
        acc[t] = V::fmadd(V::cvt(corr[t]), V::neg(V::mul(dmin, dx)), acc[t]);
      }
    }
  }
  for (int t = 0; t < T; ++t) {
    alignas(64) float out[L];
    V::fstore(out, acc[t]);
    float* y = a.y + (tok0 + t) * a.out + row0;
    for (int r = 0; r < nr; ++r) y[r] = out[r];
  }
}

// Tokens per pass: each row tile is packed once per pass and the pass's q8_K activations are
// read once per row tile.
constexpr int64_t kKPanelTokenChunk = 512;

template <class V, DType kType>
void kpanel_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  constexpr int L = V::kLanes, kMaxT = V::kPanelTokens;
  using Tile = void (*)(const MatmulArgs&, const int32_t*, int64_t, int, int64_t);
  static constexpr auto kTiles = []<size_t... T>(std::index_sequence<T...>) {
    return std::array<Tile, kMaxT>{&kpanel_tile<V, kType, static_cast<int>(T) + 1>...};
  }(std::make_index_sequence<kMaxT>());
  thread_local std::vector<int32_t> panel;
  panel.resize(static_cast<size_t>(a.in / kQK_K * KPanel<kType>::kBlockVectors * L));
  for (int64_t chunk = 0; chunk < a.n_tokens; chunk += kKPanelTokenChunk) {
    const int64_t chunk_end = std::min(chunk + kKPanelTokenChunk, a.n_tokens);
    for (int64_t row = row_begin; row < row_end; row += L) {
      const int nr = static_cast<int>(std::min<int64_t>(L, row_end - row));
      pack_kpanel<kType, L>(a, row, nr, panel.data());
      for (int64_t tok = chunk; tok < chunk_end; tok += kMaxT) {
        kTiles[std::min<int64_t>(kMaxT, chunk_end - tok) - 1](a, panel.data(), row, nr, tok);
      }
    }
  }
}

// From this many tokens the panels pay for their packing; fewer take kquant_rows (the weights
// read as stored).
constexpr int64_t kKPanelMinTokens = kKDecodeMaxTokens + 1;

template <class V>
void kquant_rows_of_type(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  const bool panel = a.n_tokens >= kKPanelMinTokens;
  switch (a.type) {
    case DType::kQ4_K:
      return panel ? kpanel_rows<V, DType::kQ4_K>(a, row_begin, row_end)
                   : kquant_rows<typename V::Decode, DType::kQ4_K>(a, row_begin, row_end);
    case DType::kQ5_K:
      return panel ? kpanel_rows<V, DType::kQ5_K>(a, row_begin, row_end)
                   : kquant_rows<typename V::Decode, DType::kQ5_K>(a, row_begin, row_end);
    case DType::kQ6_K:
      return panel ? kpanel_rows<V, DType::kQ6_K>(a, row_begin, row_end)
                   : kquant_rows<typename V::Decode, DType::kQ6_K>(a, row_begin, row_end);
    default: return;  // kquant_has_kernels() is false: ops.cc never sends these
  }
}

}  // namespace
}  // namespace koi::kernels
