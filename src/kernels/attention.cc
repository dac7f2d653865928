// The fused attention's entry point: cuts the runs into work items, groups them into chunks of
// equal causal cost for the pool, and dispatches to a level; plus the portable level and the
// scalar reference.
#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/attention_kernels.h"
#include "kernels/attention_tiles_inl.h"
#include "kernels/isa.h"
#include "kernels/run_rows.h"

namespace koi::kernels {
namespace {

// About this many rows (query heads x tokens) per work item: their outputs stay in L1 beside one
// K/V tile, and each K/V tile read serves them all.
constexpr int64_t kItemRows = 128;

// Plain C++ vectors of 8 lanes for the portable level.
struct PortableVec {
  struct V {
    float x[8];
  };
  static constexpr int kWidth = 8, kChunks = 2;
  static V zero() { return V{}; }
  static V load(const float* p) {
    V v;
    std::copy_n(p, kWidth, v.x);
    return v;
  }
  static void store(float* p, const V& v) { std::copy_n(v.x, kWidth, p); }
  static V set1(float f) {
    V v;
    std::fill_n(v.x, kWidth, f);
    return v;
  }
  static V fma(const V& a, const V& b, const V& c) {
    V v;
    for (int i = 0; i < kWidth; ++i) v.x[i] = a.x[i] * b.x[i] + c.x[i];
    return v;
  }
  static V mul(const V& a, const V& b) {
    V v;
    for (int i = 0; i < kWidth; ++i) v.x[i] = a.x[i] * b.x[i];
    return v;
  }
  static V sub(const V& a, const V& b) {
    V v;
    for (int i = 0; i < kWidth; ++i) v.x[i] = a.x[i] - b.x[i];
    return v;
  }
  static V keep_first(V v, int n, float fill) {
    for (int i = n; i < kWidth; ++i) v.x[i] = fill;
    return v;
  }
  static float hmax(const V& v) { return *std::max_element(v.x, v.x + kWidth); }
  static float hsum(const V& v) {
    return ((v.x[0] + v.x[4]) + (v.x[1] + v.x[5])) + ((v.x[2] + v.x[6]) + (v.x[3] + v.x[7]));
  }
  static V exp(V v) {
    for (float& f : v.x) f = std::exp(f);
    return v;
  }
};

// The items of every run: query tiles of about kItemRows rows, times the KV heads.
std::vector<AttentionItem> make_items(const AttentionShape& s, std::span<const AttentionRun> runs) {
  const int64_t group = s.n_heads / s.n_kv_heads;
  const int64_t tile_tokens = std::max<int64_t>(1, kItemRows / group);
  std::vector<AttentionItem> items;
  for (const AttentionRun& run : runs) {
    for (int64_t t0 = 0; t0 < run.n_tokens; t0 += tile_tokens) {
      for (int kv_head = 0; kv_head < s.n_kv_heads; ++kv_head) {
        items.push_back({&run, t0, std::min(t0 + tile_tokens, run.n_tokens), kv_head});
      }
    }
  }
  return items;
}

// Multiply-adds of an item: its rows times the keys its last token sees, for the scores and for
// the weighted sum of V.
int64_t item_cost(const AttentionShape& s, const AttentionItem& item) {
  const int64_t rows = (item.token_end - item.token_begin) * (s.n_heads / s.n_kv_heads);
  const int64_t keys = item.run->first_pos + item.token_end;
  return rows * keys * 2 * s.head_dim;
}

void check_args(const AttentionShape& s, const PagedKv& kv, std::span<const AttentionRun> runs) {
  KOI_CHECK(s.n_kv_heads > 0 && s.n_heads % s.n_kv_heads == 0 && s.head_dim > 0);
  KOI_CHECK(kv.block_size > 0 && kv.slot_floats >= static_cast<int64_t>(s.n_kv_heads) * s.head_dim);
  KOI_CHECK(kv.dtype == DType::kF32 || kv.dtype == DType::kF16 || kv.dtype == DType::kQ8_0);
  KOI_CHECK(s.head_dim % dtype_block_size(kv.dtype) == 0 && kv.slot_floats % dtype_block_size(kv.dtype) == 0);
  for (const AttentionRun& run : runs) {
    const int64_t last = run.first_pos + run.n_tokens - 1;
    KOI_CHECK(run.first_pos >= 0 && static_cast<int64_t>(run.block_table.size()) * kv.block_size > last);
  }
}

}  // namespace

namespace portable {
void attention_items(const AttentionArgs& a, std::span<const AttentionItem> items) {
  run_attention_items<PortableVec>(a, items);
}
}  // namespace portable

void attention(const AttentionShape& shape, const float* q, const PagedKv& kv, std::span<const AttentionRun> runs,
               float* out, ThreadPool* pool) {
  check_args(shape, kv, runs);
  const std::vector<AttentionItem> items = make_items(shape, runs);
  if (items.empty()) return;
  const AttentionArgs args{shape, q, kv, out};
  const Isa isa = active_isa();
  auto* level = isa == Isa::kPortable ? &portable::attention_items
                : isa == Isa::kAvx2   ? &avx2::attention_items
                                      : &avx512::attention_items;

  // Chunks of equal cost: chunk c holds the items whose cost prefix starts in
  // [c * total / n, (c + 1) * total / n). The causal cost of a prompt's last tiles is many times
  // that of its first, so equal item counts would hand one thread most of the work.
  std::vector<int64_t> prefix(items.size() + 1, 0);
  for (size_t i = 0; i < items.size(); ++i) prefix[i + 1] = prefix[i] + item_cost(shape, items[i]);
  const int64_t total = prefix.back();
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t n_chunks = std::min<int64_t>(static_cast<int64_t>(items.size()), ThreadPool::kRangesPerThread * threads);
  std::vector<size_t> bounds(static_cast<size_t>(n_chunks) + 1, items.size());
  bounds[0] = 0;
  for (int64_t c = 1; c < n_chunks; ++c) {
    const int64_t start = total * c / n_chunks;
    bounds[c] = static_cast<size_t>(std::lower_bound(prefix.begin(), prefix.end() - 1, start) - prefix.begin());
  }
  auto run_chunks = [&](int64_t c_begin, int64_t c_end) {
    const std::span<const AttentionItem> all(items);
    level(args, all.subspan(bounds[c_begin], bounds[c_end] - bounds[c_begin]));
  };
  run_rows(pool, n_chunks, total, run_chunks);
}

namespace ref {

void attention(const AttentionShape& s, const float* q, const PagedKv& kv, std::span<const AttentionRun> runs,
               float* out) {
  check_args(s, kv, runs);
  const int64_t hd = s.head_dim, group = s.n_heads / s.n_kv_heads;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  std::vector<double> scores, acc(static_cast<size_t>(hd));
  std::vector<float> row(static_cast<size_t>(hd));
  for (const AttentionRun& run : runs) {
    for (int64_t t = 0; t < run.n_tokens; ++t) {
      const int64_t token = run.first_token + t, pos = run.first_pos + t;
      for (int64_t head = 0; head < s.n_heads; ++head) {
        const float* qh = q + token * s.q_dim() + head * hd;
        auto slot = [&](int64_t j) {
          return static_cast<int64_t>(run.block_table[j / kv.block_size]) * kv.block_size + j % kv.block_size;
        };
        // Head kv_head of the slot holding position j, dequantized.
        auto read = [&](const void* base, int64_t j, float* dst) {
          const int64_t bytes = slot(j) * dtype_row_bytes(kv.dtype, kv.slot_floats) +
                                head / group * dtype_row_bytes(kv.dtype, hd);
          dequantize_row(kv.dtype, static_cast<const std::byte*>(base) + bytes, dst, hd);
        };
        scores.assign(static_cast<size_t>(pos + 1), 0.0);
        double max = -INFINITY;
        for (int64_t j = 0; j <= pos; ++j) {
          read(kv.k, j, row.data());
          double dot = 0.0;
          for (int64_t d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * row[d];
          scores[j] = dot * scale;
          max = std::max(max, scores[j]);
        }
        double sum = 0.0;
        for (double& x : scores) sum += (x = std::exp(x - max));
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j <= pos; ++j) {
          read(kv.v, j, row.data());
          for (int64_t d = 0; d < hd; ++d) acc[d] += scores[j] / sum * row[d];
        }
        float* dst = out + token * s.q_dim() + head * hd;
        for (int64_t d = 0; d < hd; ++d) dst[d] = static_cast<float>(acc[d]);
      }
    }
  }
}

}  // namespace ref
}  // namespace koi::kernels
