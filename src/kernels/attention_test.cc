// The fused attention at every level against the scalar reference, on awkward shapes, and the
// invariances the engine relies on: a token's output is bitwise the same however its sequence is
// cut into runs, whatever else is in the batch, and for any number of threads.
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <vector>

#include "base/random.h"
#include "kernels/isa_testing.h"

namespace koi::kernels {
namespace {

// A paged cache holding some sequences, each with a shuffled block table, stored as `dtype`
// (f32, f16 or q8_0; values quantized by tensor's quantize_row, as model::KvCache writes them).
// Every slot no sequence wrote holds NaN (an f16 NaN, or a NaN q8_0 scale), so a kernel that
// reads past a sequence's positions fails the comparison.
struct PagedCache {
  PagedCache(const AttentionShape& s, int block_size, const std::vector<int>& lengths, uint64_t seed,
             DType dtype = DType::kF32)
      : shape(s), rng(seed) {
    const int64_t slot_floats = static_cast<int64_t>(s.n_kv_heads) * s.head_dim;
    const int64_t slot_bytes = dtype_row_bytes(dtype, slot_floats);
    int blocks = 0;
    for (int len : lengths) blocks += (len + block_size - 1) / block_size;
    std::vector<int32_t> ids(static_cast<size_t>(blocks));
    std::iota(ids.begin(), ids.end(), 0);
    for (size_t i = ids.size(); i > 1; --i) std::swap(ids[i - 1], ids[rng.below(i)]);
    const size_t bytes = static_cast<size_t>(blocks) * block_size * slot_bytes;
    k.resize(bytes);
    v.resize(bytes);
    if (dtype == DType::kF32) {
      const float nan = std::numeric_limits<float>::quiet_NaN();
      for (size_t i = 0; i < bytes; i += sizeof(float)) {
        std::memcpy(k.data() + i, &nan, sizeof(nan));
        std::memcpy(v.data() + i, &nan, sizeof(nan));
      }
    } else {
      // Little-endian f16 NaN (0x7e00) at every even byte: every f16 value, every q8_0 scale.
      for (size_t i = 0; i < bytes; ++i) k[i] = v[i] = std::byte{i % 2 == 0 ? uint8_t{0x00} : uint8_t{0x7e}};
    }
    std::vector<float> k_slot(static_cast<size_t>(slot_floats)), v_slot(k_slot.size());
    size_t next = 0;
    for (int len : lengths) {
      std::vector<int32_t>& table = tables.emplace_back();
      for (int b = 0; b < (len + block_size - 1) / block_size; ++b) table.push_back(ids[next++]);
      for (int p = 0; p < len; ++p) {
        const int64_t slot = static_cast<int64_t>(table[p / block_size]) * block_size + p % block_size;
        for (int64_t i = 0; i < slot_floats; ++i) {
          k_slot[i] = 2.0f * rng.uniform_f() - 1.0f;
          v_slot[i] = 2.0f * rng.uniform_f() - 1.0f;
        }
        quantize_row(dtype, k_slot.data(), k.data() + slot * slot_bytes, slot_floats);
        quantize_row(dtype, v_slot.data(), v.data() + slot * slot_bytes, slot_floats);
      }
    }
    kv = {k.data(), v.data(), slot_floats, block_size, dtype};
  }

  // Queries for n tokens, scaled so that the softmax is peaked for some heads and flat for others.
  std::vector<float> queries(int64_t n_tokens) {
    std::vector<float> q(static_cast<size_t>(n_tokens * shape.q_dim()));
    for (size_t i = 0; i < q.size(); ++i) {
      const int64_t head = static_cast<int64_t>(i) % shape.q_dim() / shape.head_dim;
      q[i] = (head % 3 == 0 ? 6.0f : 1.0f) * (2.0f * rng.uniform_f() - 1.0f);
    }
    return q;
  }

  AttentionRun run(int seq, int64_t first_token, int32_t first_pos, int64_t n_tokens) const {
    return {first_token, n_tokens, first_pos, tables[static_cast<size_t>(seq)]};
  }

  AttentionShape shape;
  Rng rng;
  std::vector<std::byte> k, v;
  std::vector<std::vector<int32_t>> tables;
  PagedKv kv;
};

struct Case {
  int n_heads, n_kv_heads, head_dim, block_size;
};

// Head dims below, at and past the vector widths; GQA ratios 1, 3, 4 and 8 (TinyLlama: 32 / 4
// heads of 64); block sizes that are not the key tile.
constexpr Case kCases[] = {
    {4, 4, 8, 16}, {6, 2, 24, 7}, {8, 1, 40, 16}, {32, 4, 64, 16}, {3, 1, 80, 5}, {4, 2, 128, 32}, {2, 2, 64, 1},
};

// Outputs are convex combinations of values in [-1, 1]; the fast levels (f32 accumulation, a
// vector exp within 2 ulp of expf, online rescaling) stay within this of the double reference.
constexpr float kTolerance = 2e-5f;

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  float worst = 0.0f;
  for (size_t i = 0; i < a.size(); ++i) {
    const float d = std::fabs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
  }
  return worst;
}

constexpr DType kKvTypes[] = {DType::kF32, DType::kF16, DType::kQ8_0};

TEST(Attention, MatchesReferenceAtEveryLevelAndKvType) {
  for (DType dtype : kKvTypes) {
    for (const Case& c : kCases) {
      if (c.head_dim % dtype_block_size(dtype) != 0) continue;  // q8_0 heads are whole blocks
      const AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim};
      // Sequence 0: a 37-token prompt; 1: a chunk of 11 tokens after 29 cached ones; 2-4: decode
      // tokens at positions 0, block_size and 50 (ends of blocks and tiles).
      PagedCache cache(shape, c.block_size, {37, 40, 1, c.block_size + 1, 51}, 7, dtype);
      const std::vector<AttentionRun> runs = {cache.run(0, 0, 0, 37), cache.run(1, 37, 29, 11), cache.run(2, 48, 0, 1),
                                              cache.run(3, 49, c.block_size, 1), cache.run(4, 50, 50, 1)};
      const int64_t n_tokens = 51;
      const std::vector<float> q = cache.queries(n_tokens);
      std::vector<float> want(q.size()), got(q.size());
      ref::attention(shape, q.data(), cache.kv, runs, want.data());
      for (Isa isa : levels()) {
        ScopedIsa scoped(isa);
        SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << isa_name(isa) << " heads " << c.n_heads << "/"
                                        << c.n_kv_heads << " dim " << c.head_dim << " block " << c.block_size);
        std::fill(got.begin(), got.end(), 0.0f);
        attention(shape, q.data(), cache.kv, runs, got.data(), nullptr);
        EXPECT_LE(max_abs_diff(got, want), kTolerance);
      }
    }
  }
}

// What storing the cache in f16 or q8_0 costs: the reference over the rounded cache against the
// reference over the f32 one (same values before rounding), with the outputs in [-1, 1]. f16
// keeps 11 significant bits; q8_0 rounds each value to a step of max|block| / 127. Measured:
// 5.3e-4 (f16) and 9.4e-3 (q8_0); the bounds leave about 3x.
TEST(Attention, QuantizedCacheStaysNearF32) {
  const AttentionShape shape{8, 2, 64};
  const std::vector<int> lengths = {200, 33};
  const std::vector<float> q = PagedCache(shape, 16, lengths, 21).queries(233);
  std::vector<float> exact(q.size()), rounded(q.size());
  auto run_ref = [&](DType dtype, std::vector<float>& out) {
    const PagedCache cache(shape, 16, lengths, 21, dtype);
    ref::attention(shape, q.data(), cache.kv, std::vector{cache.run(0, 0, 0, 200), cache.run(1, 200, 0, 33)},
                   out.data());
  };
  run_ref(DType::kF32, exact);
  run_ref(DType::kF16, rounded);
  EXPECT_LE(max_abs_diff(rounded, exact), 2e-3f);
  run_ref(DType::kQ8_0, rounded);
  EXPECT_LE(max_abs_diff(rounded, exact), 3e-2f);
  EXPECT_GT(max_abs_diff(rounded, exact), 0.0f);  // the cache really was quantized
}

TEST(Attention, LongPromptMatchesReference) {
  // 300 tokens: many key tiles, so the running max and the rescaling are exercised.
  const AttentionShape shape{8, 2, 64};
  PagedCache cache(shape, 16, {300}, 11);
  const std::vector<AttentionRun> runs = {cache.run(0, 0, 0, 300)};
  const std::vector<float> q = cache.queries(300);
  std::vector<float> want(q.size()), got(q.size());
  ref::attention(shape, q.data(), cache.kv, runs, want.data());
  ThreadPool pool(2);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    SCOPED_TRACE(isa_name(isa));
    attention(shape, q.data(), cache.kv, runs, got.data(), &pool);
    EXPECT_LE(max_abs_diff(got, want), kTolerance);
  }
}

TEST(Attention, BitwiseSameForAnyRunSplitBatchAndThreadCount) {
  for (DType dtype : kKvTypes) {
  const AttentionShape shape{12, 4, dtype == DType::kQ8_0 ? 64 : 40};
  const int len = 70;
  PagedCache cache(shape, 16, {len, 33}, 3, dtype);
  const std::vector<float> q = cache.queries(len + 1);  // token len: sequence 1's decode token
  ThreadPool pool2(2), pool3(3);
  for (Isa isa : levels()) {
    ScopedIsa scoped(isa);
    SCOPED_TRACE(testing::Message() << dtype_name(dtype) << " " << isa_name(isa));
    // Sequence 0 as one prompt, on the calling thread.
    std::vector<float> whole(q.size(), 0.0f);
    attention(shape, q.data(), cache.kv, std::vector{cache.run(0, 0, 0, len)}, whole.data(), nullptr);
    const size_t seq0_floats = static_cast<size_t>(len * shape.q_dim());

    // As chunks of 1, 5, 17, 47 tokens, with sequence 1's decode token in the same batch, on 2 and 3 threads.
    std::vector<float> chunked(q.size(), 0.0f);
    const std::vector<AttentionRun> runs = {cache.run(0, 0, 0, 1), cache.run(1, len, 32, 1), cache.run(0, 1, 1, 5),
                                            cache.run(0, 6, 6, 17), cache.run(0, 23, 23, 47)};
    attention(shape, q.data(), cache.kv, runs, chunked.data(), &pool2);
    EXPECT_EQ(std::memcmp(whole.data(), chunked.data(), seq0_floats * sizeof(float)), 0);

    // One decode token at a time, on 3 threads.
    std::vector<float> stepwise(q.size(), 0.0f);
    for (int t = 0; t < len; ++t) {
      attention(shape, q.data(), cache.kv, std::vector{cache.run(0, t, t, 1)}, stepwise.data(), &pool3);
    }
    EXPECT_EQ(std::memcmp(whole.data(), stepwise.data(), seq0_floats * sizeof(float)), 0);

    // Sequence 1's token alone against its value in the mixed batch.
    std::vector<float> alone(q.size(), 0.0f);
    attention(shape, q.data(), cache.kv, std::vector{cache.run(1, len, 32, 1)}, alone.data(), nullptr);
    EXPECT_EQ(std::memcmp(alone.data() + seq0_floats, chunked.data() + seq0_floats,
                          static_cast<size_t>(shape.q_dim()) * sizeof(float)),
              0);
  }
  }
}

TEST(Attention, WritesOnlyTheRowsOfItsRuns) {
  const AttentionShape shape{4, 2, 16};
  PagedCache cache(shape, 4, {9}, 5);
  const std::vector<float> q = cache.queries(12);
  std::vector<float> out(q.size(), -7.0f);
  // Tokens 3..5 of the batch only.
  attention(shape, q.data(), cache.kv, std::vector{cache.run(0, 3, 6, 3)}, out.data(), nullptr);
  const int64_t qd = shape.q_dim();
  for (int64_t i = 0; i < 12 * qd; ++i) {
    const bool inside = i >= 3 * qd && i < 6 * qd;
    if (inside) {
      EXPECT_NE(out[i], -7.0f) << i;
    } else {
      EXPECT_EQ(out[i], -7.0f) << i;
    }
  }
}

}  // namespace
}  // namespace koi::kernels
