// The GGUF K-quant block types (ggml's "k-quants"): super-blocks of 256 values split into
// sub-blocks of 16 or 32 that each carry a small integer scale (and, for Q4_K/Q5_K/Q2_K, a
// minimum), the sub-block scales themselves quantized against one or two fp16 super-block
// scales. Byte layouts are those of ggml's ggml-common.h, so GGUF tensor data is read as is.
//
// Each type's value i of a block is (a plain reading of the format, which the decoders here
// implement and kquants_test.cc checks on hand-built blocks):
//   Q4_K  sub-block j = i / 32 (8 of them), scale sc_j and min m_j (6 bits each, packed in
//         `scales`, see kquant_scale_min), quant q = 4 bits of qs[32 * (i / 64) + i % 32]
//         (low nibble for i % 64 < 32, else high): x = d * sc_j * q - dmin * m_j.
//   Q5_K  as Q4_K plus a fifth bit: bit j of qh[i % 32] adds 16 to q.
//   Q6_K  sub-block j = i / 16 (16 of them), signed 8-bit scale sc_j; q (6 bits) has its low 4
//         bits in ql[64 * h + 32 * (k & 1) + l] (low nibble for k < 2, else high) and its high
//         2 bits at bits 2k..2k+1 of qh[32 * h + l], where h = i / 128, k = i % 128 / 32,
//         l = i % 32: x = d * sc_j * (q - 32).
//   Q3_K  sub-block j = i / 16, 6-bit scale sc_j (packed in 12 bytes, see kquant_q3_scales)
//         used as sc_j - 32; q (3 bits) has its low 2 bits at bits 2k..2k+1 of
//         qs[32 * h + l] and its high bit at bit 4h + k of hmask[l] (h, k, l as for Q6_K); the
//         value is d * (sc_j - 32) * (q - 4).
//   Q2_K  sub-block j = i / 16, 4-bit scale (low nibble of scales[j]) and 4-bit min (high
//         nibble); q (2 bits) at bits 2k..2k+1 of qs[32 * h + l]: x = d * sc * q - dmin * m.
//   Q8_K  the activation type of the K-quant dot products: an f32 scale, 256 signed bytes and
//         the sums of each 16 of them (bsums), x = d * q.
//
// Quantizers (f32 -> blocks) exist for Q4_K, Q5_K, Q6_K and Q8_K; Q2_K and Q3_K are read
// only. All functions are pure and thread-safe; n is a multiple of kQK_K.
#pragma once

#include <cstdint>

namespace koi {

constexpr int kQK_K = 256;

struct BlockQ4_K {
  uint16_t d;          // fp16 super-block scale of the sub-block scales
  uint16_t dmin;       // fp16 super-block scale of the sub-block mins
  uint8_t scales[12];  // 8 scales and 8 mins, 6 bits each
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

struct BlockQ5_K {
  uint16_t d;
  uint16_t dmin;
  uint8_t scales[12];
  uint8_t qh[kQK_K / 8];  // fifth bits
  uint8_t qs[kQK_K / 2];  // low 4 bits
};
static_assert(sizeof(BlockQ5_K) == 176);

struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];   // low 4 bits
  uint8_t qh[kQK_K / 4];   // high 2 bits
  int8_t scales[kQK_K / 16];
  uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];  // high bits
  uint8_t qs[kQK_K / 4];     // low 2 bits
  uint8_t scales[12];        // 16 scales, 6 bits each
  uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);

struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];  // low nibble scale, high nibble min
  uint8_t qs[kQK_K / 4];
  uint16_t d;
  uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

struct BlockQ8_K {
  float d;
  int8_t qs[kQK_K];
  int16_t bsums[kQK_K / 16];  // sum of qs[16 g .. 16 g + 15]
};
static_assert(sizeof(BlockQ8_K) == 292);

// Scale and min of sub-block j (0..7) of a Q4_K/Q5_K block from its 12 packed bytes: sub-blocks
// 0..3 keep them in the low 6 bits of bytes j and j + 4; sub-blocks 4..7 in the nibbles of byte
// j + 4 (scale low, min high) with their top 2 bits in the top bits of bytes j - 4 and j.
inline void kquant_scale_min(const uint8_t* scales, int j, int* sc, int* m) {
  if (j < 4) {
    *sc = scales[j] & 63;
    *m = scales[j + 4] & 63;
  } else {
    *sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
    *m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
  }
}
// The inverse: packs 8 scales and 8 mins (each 0..63) into 12 bytes.
void kquant_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[12]);

// The 16 scales of a Q3_K block (0..63, used as sc - 32): scale j keeps its low 4 bits in byte
// j % 8 (low nibble for j < 8, else high) and its top 2 bits at bits 2 (j / 4)..+1 of byte
// 8 + j % 4.
void kquant_q3_scales(const uint8_t scales[12], int out[16]);

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n);
void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n);
void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n);
void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n);
void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n);
void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n);

// Q4_K / Q5_K: per 32-value sub-block, a scale and min chosen by weighted least squares over
// a sweep of candidate scales (the search of llama.cpp's make_qkx2_quants, written here from
// its description: weights av|x| + |x|, 21 candidates for Q4_K, 16 for Q5_K), then the scales
// and mins rounded to 6 bits against fp16 d = max scale / 63 and dmin = max min / 63, and every
// value requantized with the rounded scales.
void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n);
void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n);
// Q6_K: per 16-value sub-block a signed scale from a sweep of 19 candidates around
// -32 / (value of largest magnitude), weighted by x^2 (llama.cpp's make_qx_quants with its
// rmse_type 1), the scales rounded to int8 against fp16 d = -(largest scale) / 128.
void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n);
// Q8_K, as ggml's quantize_row_q8_K: d = -(value of largest magnitude) / 127 (so that value
// becomes -127), q = round-to-nearest-even(x / d) clamped to 127, bsums exact.
void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n);

}  // namespace koi
