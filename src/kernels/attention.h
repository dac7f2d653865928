// Causal attention over a paged KV cache, as one fused and tiled kernel (FlashAttention-2's
// online softmax on the CPU), for prefill chunks and decode tokens alike.
//
// out[t, h] = sum_j softmax_j(q[t, h] . k[j, h / group] / sqrt(head_dim)) v[j, h / group] over
// the positions j <= pos(t) of token t's sequence, read from the cache through the sequence's
// block table (slot = block_table[j / block_size] * block_size + j % block_size).
//
// How it runs: the tokens of a run (AttentionRun) are cut into query tiles; one work item is a
// query tile and one KV head, and holds the rows of every query head of that KV group for every
// token of the tile (GQA: each K/V tile is read once for all of them). The item walks the keys
// in tiles of one vector width (aligned to position 0), keeps a running max, sum and output per
// row, and stops at the tile that holds its last token's position (causal block skipping).
// Items are grouped into chunks of equal causal cost (rows x keys), not equal token counts, and
// the pool's threads claim the chunks.
//
// Determinism (the engine's batch invariance): a row's value is computed by the same
// instructions in the same order whatever the query tile, the run it came in (a whole prompt,
// a chunk of it, or one decode token), the rest of the batch and the number of threads; only the
// level (isa.h) changes it, within the tolerance attention_test.cc states against
// ref::attention.
//
// Thread-safe; call from the pool's owner.
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "tensor/dtype.h"

namespace koi::kernels {

struct AttentionShape {
  int n_heads = 0;     // query heads
  int n_kv_heads = 0;  // K/V heads; n_heads is a multiple of it (group = n_heads / n_kv_heads)
  int head_dim = 0;

  int64_t q_dim() const { return static_cast<int64_t>(n_heads) * head_dim; }
};

// One layer's keys and values in the paged cache, stored as `dtype` (f32, f16 or q8_0, whose
// 32-value blocks never straddle a head: head_dim is a multiple of 32): the head kv_head of
// slot s starts at byte s * row_bytes(slot_floats) + kv_head * row_bytes(head_dim) of k (likewise
// v), row_bytes being dtype_row_bytes(dtype, n). The kernel dequantizes inside its tiles; values
// read as exactly what dequantize_row gives, so the dtype changes the inputs, never the order of
// the arithmetic.
struct PagedKv {
  const void* k = nullptr;
  const void* v = nullptr;
  int64_t slot_floats = 0;  // values per slot (n_kv_heads * head_dim, or more)
  int block_size = 16;
  DType dtype = DType::kF32;
};

// Tokens [first_token, first_token + n_tokens) of the batch belong to one sequence and sit at
// positions first_pos, first_pos + 1, ...; the cache already holds their K and V and those of
// every earlier position, at the slots block_table gives.
struct AttentionRun {
  int64_t first_token = 0;
  int64_t n_tokens = 0;
  int32_t first_pos = 0;
  std::span<const int32_t> block_table;
};

// q, out: [n_tokens, q_dim] f32, token t's row at t * q_dim (the runs name the rows computed).
void attention(const AttentionShape& shape, const float* q, const PagedKv& kv, std::span<const AttentionRun> runs,
               float* out, ThreadPool* pool);

namespace ref {
// The oracle: per (token, head), each K and V head read with tensor's dequantize_row, scores in
// double, a two-pass softmax, the weighted sum of V.
void attention(const AttentionShape& shape, const float* q, const PagedKv& kv, std::span<const AttentionRun> runs,
               float* out);
}  // namespace ref

}  // namespace koi::kernels
