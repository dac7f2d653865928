// Internal to src/kernels: matmul over K-quant weights (q4_K, q5_K, q6_K) at the SIMD levels.
// Only ops.cc calls kquant_matmul, after checking active_isa(); nothing here fails.
//
// The contract (ops.h states it for users): activations are quantized once per call to q8_K
// (256 values, an f32 scale d_x, bsums), bitwise as the scalar koi::quantize_row_q8_K (the SIMD
// levels use avx2::quantize_row_q8_K, checked against it). Then,
// for weight row o and token t, over the super-blocks b in order:
//   q4_K, q5_K:  isum = sum_j sc_j * dot_j,  msum = sum_j m_j * (bsum_2j + bsum_2j+1)
//                y = fma(float(isum), d * d_x, y);  y = fma(float(msum), -(dmin * d_x), y)
//   q6_K:        isum = sum_j sc_j * dot_j (q - 32 signed)
//                y = fma(float(isum), d * d_x, y)
// where dot_j is the exact integer dot of sub-block j's quants and activation bytes (32 values
// for q4_K/q5_K, 16 for q6_K). isum and msum are exact int32 (|isum| < 2^28), so every level and
// every order of integer adds gives bitwise the same y, which ref::kquant_matmul computes in
// plain scalar code.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "kernels/isa.h"
#include "kernels/simd.h"
#include "tensor/kquants.h"
#include "tensor/tensor.h"

namespace koi::kernels {

// Whether the SIMD levels have integer kernels for this weight type (q4_K, q5_K, q6_K); the
// other K-quants (q2_K, q3_K, q8_K) take the portable dequantize-and-dot path.
inline bool kquant_has_kernels(DType t) { return t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K; }

// y = w x at `isa` (not portable) for a type with kquant_has_kernels().
void kquant_matmul(Isa isa, const TensorView& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool);

namespace ref {
// The contract's value for one weight row of n_blocks super-blocks against one q8_K row.
float kquant_dot(DType type, const uint8_t* w_row, const BlockQ8_K* x, int64_t n_blocks);
}  // namespace ref

// MatmulArgs with x rows of BlockQ8_K: y for weight rows [row_begin, row_end) and every token.
namespace avx2 {
void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
// koi::quantize_row_q8_K's bytes, in vectors (NaNs included: skipped by the max, converted as
// x86's scalar conversion does).
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);
}  // namespace avx2
namespace avx512 {
void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
}  // namespace avx512

}  // namespace koi::kernels
