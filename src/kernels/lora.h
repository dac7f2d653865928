// The batched LoRA product (Punica's SGMV / S-LoRA's gather-by-adapter idea): one call adds the
// low-rank updates of many adapters to one projection's output, each row with its own adapter.
//
//   y[t] += scale_i * (x[t] A_i^T) B_i^T      for every row t with adapter_of_row[t] = i >= 0
//
// A_i is (rank_i, in) and B_i (out, rank_i) as PEFT stores them; the kernel takes B_i
// transposed, bt_i (rank_i, out), so that both products walk contiguous rows. Rows whose
// adapter is -1 (the base model) are left as they are. The rows of one adapter are gathered
// and computed together, so A_i and B_i are read once per tile of rows, not once per row.
//
// Determinism (kernels/ops.h): a row's result depends only on its own x, its adapter and y;
// never on the other rows, their adapters or the thread count. u[t, k] = dot(x[t], A_i[k]),
// then y[t] += (scale_i u[t, k]) bt_i[k] for k = 0, 1, ... in order.
//
// Thread-safe; with a pool, must be called by the pool's owner.
#pragma once

#include <cstdint>
#include <span>

#include "base/thread_pool.h"

namespace koi::kernels {

// The largest rank lora_add takes (vLLM's max_lora_rank tops out at 512; PEFT adapters are
// rarely above 64).
inline constexpr int kMaxLoraRank = 256;

// One adapter's matrices for one projection. Not owned.
struct LoraMatrices {
  const float* a = nullptr;   // (rank, in), row-major
  const float* bt = nullptr;  // (rank, out), row-major: B transposed
  int rank = 0;               // 0: the adapter does not touch this projection; at most kMaxLoraRank
  float scale = 1.0f;         // lora_alpha / rank
};

// x: [n_rows, in]; y: [n_rows, out]; adapter_of_row: n_rows indices into `adapters`, or -1.
void lora_add(std::span<const LoraMatrices> adapters, const int32_t* adapter_of_row, const float* x, int64_t in,
              float* y, int64_t out, int64_t n_rows, ThreadPool* pool);

namespace ref {
// Row by row, scalar loops accumulating in double: the oracle the fast path is held to.
void lora_add(std::span<const LoraMatrices> adapters, const int32_t* adapter_of_row, const float* x, int64_t in,
              float* y, int64_t out, int64_t n_rows);
}  // namespace ref

}  // namespace koi::kernels
