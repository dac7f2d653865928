// Internal to src/kernels: the tiled attention loop (attention.h) shared by every level. Included
// by attention.cc (portable), attention_avx2.cc and attention_avx512.cc after their `#pragma GCC
// target`; everything sits in an anonymous namespace, so each level gets its own copy. A level
// supplies a vector type Vec with
//   kWidth (floats per vector: also the keys per K/V tile), kChunks (output vectors per row that
//   one update keeps in registers for kOutRows rows), V zero(), V load(const float*), void
//   store(float*, V), V set1(float), V fma(V a, V b, V c) = a * b + c, V mul(V, V), V sub(V, V),
//   V keep_first(V x, int n, float fill) (lanes >= n replaced by fill), float hmax(V),
//   float hsum(V), V exp(V) (exp(-inf) = 0).
//
// The K/V tile is read from the cache in its dtype and dequantized here (dequantize_head), so
// f16 and q8_0 caches run the same arithmetic as f32 on the values they hold.
//
// Per row (one query head of one token) and per key tile: scores s = q . K (q prescaled by
// 1/sqrt(head_dim)), masked past the row's position; m' = max(m, max s); alpha = exp(m - m');
// p = exp(s - m'); l = l * alpha + p (lane-wise, summed at the end); o = o * alpha + sum_j p_j v_j.
// A row with no key in the tile gets alpha = 1 and p = 0, which leaves m, l and o as they were,
// so a tile that a row only shares with later rows of its query tile changes nothing for it;
// every row thus sees the same instructions whichever tile and run it is computed in.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "kernels/attention_kernels.h"
#include "tensor/dtype.h"

namespace koi::kernels {
namespace {

// Rows per register tile: the score step keeps kRows accumulators, the output update kOutRows x
// kChunks (and runs kRows / kOutRows times). Row counts are padded to a multiple of kRows with rows
// that have no keys.
constexpr int kRows = 8, kOutRows = 4;

// n values (whole blocks) of one head in the cache, of type t (f16 or q8_0), as f32: the same
// numbers tensor's dequantize_row gives (the f16 conversion is exact; a q8_0 value is q * d), in
// code compiled for the including level (F16C converts the f16 values on AVX2 and AVX-512).
inline void dequantize_head(DType t, const std::byte* src, float* dst, int64_t n) {
  if (t == DType::kF16) {
    for (int64_t i = 0; i < n; ++i) {
      _Float16 h;
      std::memcpy(&h, src + 2 * i, sizeof(h));
      dst[i] = static_cast<float>(h);
    }
    return;
  }
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    BlockQ8_0 block;
    std::memcpy(&block, src + b * static_cast<int64_t>(sizeof(BlockQ8_0)), sizeof(block));
    _Float16 h;
    std::memcpy(&h, &block.d, sizeof(h));
    const float d = static_cast<float>(h);
    for (int j = 0; j < kQK8_0; ++j) dst[b * kQK8_0 + j] = static_cast<float>(block.qs[j]) * d;
  }
}

template <class Vec>
class AttentionTiles {
 public:
  static constexpr int kW = Vec::kWidth;

  void run(const AttentionArgs& a, const AttentionItem& item) {
    setup(a, item);
    const int32_t last_pos = pos_[static_cast<size_t>(rows_ - 1)];
    for (int32_t key0 = 0; key0 <= last_pos; key0 += kW) {
      load_kv_tile(a, *item.run, item.kv_head, key0, std::min(kW, last_pos - key0 + 1));
      for (int64_t r0 = 0; r0 < padded_rows_; r0 += kRows) {
        if (max_pos(r0) < key0) continue;  // causal skip: no row of this register tile sees a key here
        scores_and_weights(r0, key0);
        for (int half = 0; half < kRows; half += kOutRows) update_outputs(r0 + half, half);
      }
    }
    finish(a, item);
  }

 private:
  using V = typename Vec::V;

  void setup(const AttentionArgs& a, const AttentionItem& item) {
    const AttentionShape& s = a.shape;
    group_ = s.n_heads / s.n_kv_heads;
    hd_ = s.head_dim;
    hdp_ = (hd_ + kW - 1) / kW * kW;
    rows_ = (item.token_end - item.token_begin) * group_;
    padded_rows_ = (rows_ + kRows - 1) / kRows * kRows;
    const auto pr = static_cast<size_t>(padded_rows_);
    // Only the running state starts from zero. q_ rows past rows_ (padding, no keys) and k_t_'s
    // lanes past a tile's keys are computed with but never kept (keep_first masks those lanes in
    // every row), and v_'s rows past row 0 are written before they are read; row 0, the zero row,
    // is never written, so v_ is zeroed only when its size changes.
    q_.resize(pr * hdp_);
    o_.assign(pr * hdp_, 0.0f);
    l_.assign(pr * kW, 0.0f);
    m_.assign(pr, -std::numeric_limits<float>::infinity());
    pos_.assign(pr, -1);
    k_t_.resize(static_cast<size_t>(hd_) * kW);
    k_row_.resize(static_cast<size_t>(hd_));
    if (v_.size() != static_cast<size_t>(kW + 1) * hdp_) v_.assign(static_cast<size_t>(kW + 1) * hdp_, 0.0f);
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd_));
    // Row r = token * group + head within the group: a token's heads are adjacent.
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = item.token_begin + r / group_;
      const int64_t head = static_cast<int64_t>(item.kv_head) * group_ + r % group_;
      const float* src = a.q + (item.run->first_token + t) * s.q_dim() + head * hd_;
      for (int64_t d = 0; d < hd_; ++d) q_[r * hdp_ + d] = src[d] * scale;
      pos_[r] = item.run->first_pos + static_cast<int32_t>(t);
    }
  }

  int32_t max_pos(int64_t r0) const {
    int32_t m = pos_[r0];
    for (int i = 1; i < kRows; ++i) m = std::max(m, pos_[r0 + i]);
    return m;
  }

  // Keys [key0, key0 + n) into k_t_ (transposed: [head_dim][kW]; lanes past n keep stale values) and v_rows_
  // (an f32 cache's rows where they are a whole number of vectors, else dequantized or padded
  // copies in v_; past n, a row of zeros). Prefetches the next tile's rows, which sit in other
  // blocks of the cache.
  void load_kv_tile(const AttentionArgs& a, const AttentionRun& run, int kv_head, int32_t key0, int n) {
    const PagedKv& kv = a.kv;
    const int32_t last_needed = pos_[static_cast<size_t>(rows_ - 1)];
    const int64_t slot_bytes = dtype_row_bytes(kv.dtype, kv.slot_floats);
    const int64_t head_bytes = dtype_row_bytes(kv.dtype, hd_);
    const bool f32 = kv.dtype == DType::kF32;
    const auto* k_base = static_cast<const std::byte*>(kv.k);
    const auto* v_base = static_cast<const std::byte*>(kv.v);
    auto offset = [&](int32_t p) {  // in bytes
      const int64_t slot =
          static_cast<int64_t>(run.block_table[p / kv.block_size]) * kv.block_size + p % kv.block_size;
      return slot * slot_bytes + static_cast<int64_t>(kv_head) * head_bytes;
    };
    for (int j = 0; j < kW; ++j) {
      float* v_copy = v_.data() + static_cast<int64_t>(j + 1) * hdp_;
      if (j >= n) {  // k_t_'s lane j is masked in every row; its weight is 0 against the zero row
        v_rows_[j] = v_.data();
        continue;
      }
      const int64_t off = offset(key0 + j);
      const float* k_row = reinterpret_cast<const float*>(k_base + off);
      if (!f32) {
        dequantize_head(kv.dtype, k_base + off, k_row_.data(), hd_);
        k_row = k_row_.data();
      }
      for (int64_t d = 0; d < hd_; ++d) k_t_[d * kW + j] = k_row[d];
      if (f32 && hd_ == hdp_) {
        v_rows_[j] = reinterpret_cast<const float*>(v_base + off);
      } else if (f32) {
        std::memcpy(v_copy, v_base + off, static_cast<size_t>(hd_) * sizeof(float));
        v_rows_[j] = v_copy;
      } else {
        dequantize_head(kv.dtype, v_base + off, v_copy, hd_);
        v_rows_[j] = v_copy;
      }
      if (key0 + kW + j <= last_needed) {
        const int64_t next = offset(key0 + kW + j);
        for (int64_t b = 0; b < head_bytes; b += 64) {
          __builtin_prefetch(k_base + next + b);
          __builtin_prefetch(v_base + next + b);
        }
      }
    }
  }

  // Scores of rows [r0, r0 + kRows) against the tile, then each row's online-softmax step;
  // leaves the weights in p_ and the rescale factors in alpha_.
  void scores_and_weights(int64_t r0, int32_t key0) {
    V acc[kRows];
    for (int i = 0; i < kRows; ++i) acc[i] = Vec::zero();
    const float* q0 = q_.data() + r0 * hdp_;
    for (int64_t d = 0; d < hd_; ++d) {
      const V k = Vec::load(k_t_.data() + d * kW);
      for (int i = 0; i < kRows; ++i) acc[i] = Vec::fma(Vec::set1(q0[i * hdp_ + d]), k, acc[i]);
    }
    constexpr float kNegInf = -std::numeric_limits<float>::infinity();
    for (int i = 0; i < kRows; ++i) {
      const int64_t r = r0 + i;
      const int n_keys = std::clamp(pos_[r] - key0 + 1, 0, kW);
      if (n_keys == 0) {
        alpha_[i] = 1.0f;
        Vec::store(p_ + i * kW, Vec::zero());
        continue;
      }
      const V s = Vec::keep_first(acc[i], n_keys, kNegInf);
      const float m_new = std::max(m_[r], Vec::hmax(s));
      alpha_[i] = m_new == m_[r] ? 1.0f : std::exp(m_[r] - m_new);
      const V p = Vec::exp(Vec::sub(s, Vec::set1(m_new)));
      float* l = l_.data() + r * kW;
      Vec::store(l, Vec::fma(Vec::load(l), Vec::set1(alpha_[i]), p));
      m_[r] = m_new;
      Vec::store(p_ + i * kW, p);
    }
  }

  // o = o * alpha + p V for rows [r0, r0 + kOutRows), whose weights start at row `first` of p_,
  // kChunks output vectors at a time.
  void update_outputs(int64_t r0, int first) {
    const int64_t chunks = hdp_ / kW;
    int64_t c0 = 0;
    for (; c0 + Vec::kChunks <= chunks; c0 += Vec::kChunks) update_chunks<Vec::kChunks>(r0, first, c0);
    for (; c0 < chunks; ++c0) update_chunks<1>(r0, first, c0);
  }

  template <int kC>
  void update_chunks(int64_t r0, int first, int64_t c0) {
    V acc[kOutRows][kC];
    const float* p = p_ + first * kW;
    for (int i = 0; i < kOutRows; ++i) {
      const V alpha = Vec::set1(alpha_[first + i]);
      for (int c = 0; c < kC; ++c) acc[i][c] = Vec::mul(Vec::load(o_.data() + (r0 + i) * hdp_ + (c0 + c) * kW), alpha);
    }
    for (int j = 0; j < kW; ++j) {
      V v[kC];
      for (int c = 0; c < kC; ++c) v[c] = Vec::load(v_rows_[j] + (c0 + c) * kW);
      for (int i = 0; i < kOutRows; ++i) {
        const V w = Vec::set1(p[i * kW + j]);
        for (int c = 0; c < kC; ++c) acc[i][c] = Vec::fma(w, v[c], acc[i][c]);
      }
    }
    for (int i = 0; i < kOutRows; ++i) {
      for (int c = 0; c < kC; ++c) Vec::store(o_.data() + (r0 + i) * hdp_ + (c0 + c) * kW, acc[i][c]);
    }
  }

  void finish(const AttentionArgs& a, const AttentionItem& item) {
    for (int64_t r = 0; r < rows_; ++r) {
      const int64_t t = item.token_begin + r / group_;
      const int64_t head = static_cast<int64_t>(item.kv_head) * group_ + r % group_;
      float* dst = a.out + (item.run->first_token + t) * a.shape.q_dim() + head * hd_;
      const float inv = 1.0f / Vec::hsum(Vec::load(l_.data() + r * kW));
      for (int64_t d = 0; d < hd_; ++d) dst[d] = o_[r * hdp_ + d] * inv;
    }
  }

  int64_t group_ = 0, hd_ = 0, hdp_ = 0, rows_ = 0, padded_rows_ = 0;
  // Per row: prescaled q [hdp], output o [hdp], lane sums l [kW], max m, position (-1: padding).
  std::vector<float> q_, o_, l_, m_;
  std::vector<int32_t> pos_;
  // The K/V tile: K transposed; V rows (into the cache or v_, whose row 0 is zeros); one
  // dequantized K row on its way into k_t_.
  std::vector<float> k_t_, v_, k_row_;
  const float* v_rows_[kW];
  alignas(64) float p_[kRows * kW];
  float alpha_[kRows];
};

// Every item on the calling thread, with one scratch per thread that only grows.
template <class Vec>
void run_attention_items(const AttentionArgs& a, std::span<const AttentionItem> items) {
  thread_local AttentionTiles<Vec> tiles;
  for (const AttentionItem& item : items) tiles.run(a, item);
}

}  // namespace
}  // namespace koi::kernels
