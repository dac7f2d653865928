// Internal to src/kernels: the entry points of the SIMD levels (one namespace per level, each
// implemented in its own ops_<level>.cc compiled for that level) and the arguments they share.
// Only ops.cc calls these, after checking active_isa(); nothing here allocates or fails.
#pragma once

#include <cstdint>

#include "tensor/dtype.h"

namespace koi::kernels {

// An activation row quantized for the integer dot products: 32 values per block with an f32
// scale (ggml's q8_0 keeps an f16 scale; f32 costs nothing here and drops that rounding) and
// the sum of the 32 values (the integer dots take weights with an offset, w + c, and subtract
// c * sum).
struct ActBlockQ8 {
  float d;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(ActBlockQ8) == 40);

// One matmul y[t, o] = sum_i w[o, i] * x[t, i], with x already converted to the activation
// type of the weight type (see activation_type()).
struct MatmulArgs {
  DType type;              // weight type
  const uint8_t* w;        // row o starts at w + o * w_row_bytes
  int64_t w_row_bytes;
  const uint8_t* x;        // token t starts at x + t * x_row_bytes
  int64_t x_row_bytes;
  float* y;                // y[t * out + o]
  int64_t in, out, n_tokens;
  // q8_0/q4_0: the same weights in the panel layout (a PackedMatrix), or null: then the levels
  // read w, and batches of more than a few tokens pack panels per call.
  const uint32_t* panels = nullptr;
};

// Value i of a weight row of a float type (f32, f16, bf16): the scalar tail of the float dots.
inline float float_weight(DType type, const uint8_t* row, int64_t i) {
  const auto* h = reinterpret_cast<const uint16_t*>(row);
  switch (type) {
    case DType::kF16: return f16_to_f32(h[i]);
    case DType::kBF16: return bf16_to_f32(h[i]);
    default: return reinterpret_cast<const float*>(row)[i];
  }
}

namespace avx2 {
// Quantizes n values (n a multiple of 32) into n / 32 blocks.
void quantize_row_q8(const float* x, ActBlockQ8* dst, int64_t n);
// Words of the panel layout (simd_tiles_inl.h) of a q8_0/q4_0 matrix: a.out rows padded to 16.
int64_t panel_layout_words(DType type, int64_t in, int64_t out);
// Packs the weight rows [row_begin, row_end) of a (a multiple of 16 each, or row_end == a.out)
// into their panels of `dst`, which holds panel_layout_words(a.type, a.in, a.out) words.
void pack_panels(const MatmulArgs& a, int64_t row_begin, int64_t row_end, uint32_t* dst);
// Computes y for weight rows [row_begin, row_end) and every token; weights f32/f16/bf16 take f32
// activations, q8_0/q4_0 take ActBlockQ8 rows.
void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
float dot(const float* a, const float* b, int64_t n);
void axpy(float a, const float* x, float* y, int64_t n);
void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);
void softmax(float* x, int64_t n);
void silu_mul(float* gate, const float* up, int64_t n);
void sigmoid(const float* x, float* out, int64_t n);
}  // namespace avx2

namespace avx512 {
// As avx2::matmul_rows, with 512-bit float dots and vpdpbusd integer dots.
void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
}  // namespace avx512

namespace avx512bf16 {
// As avx512::matmul_rows, except that bf16 weights take bf16 activations (vdpbf16ps).
void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end);
}  // namespace avx512bf16

}  // namespace koi::kernels
