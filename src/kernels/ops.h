// The CPU kernels behind the model's forward pass: one function per op.
//
// Every op here has a plain scalar reference in ops_ref.cc (namespace koi::kernels::ref),
// and the public entry points dispatch at run time to the fastest level the CPU supports
// (isa.h: portable, AVX2, AVX-512, AVX512-BF16; the binary needs no -march flag). A fast
// variant must agree with the reference within the tolerance its test states. matmul with
// q8_0/q4_0 weights quantizes each activation row to 8 bits (f32 block scales) and uses integer
// dots, as llama.cpp does; bf16 weights on AVX512-BF16 round activations to bf16. A caller that
// multiplies the same q8_0/q4_0 weights again and again holds them as a PackedMatrix
// (packed_matrix.h: packed once, bitwise the same results); a plain view packs panels per call
// for batches of more than a few tokens.
//
// K-quant weights (q4_K, q5_K, q6_K) at the SIMD levels meet activations quantized to q8_K (256
// values, f32 scale, as llama.cpp does) and follow one integer contract (kquant.h): per 256-value
// super-block, the exact int32 sum of the sub-block dots weighted by their 6- or 8-bit scales (and
// for q4_K/q5_K the exact sum of mins times activation sums), then one fma per sum into y in
// super-block order. So every level and every batch shape gives bitwise ref::kquant_matmul's
// value. q2_K/q3_K (read only) and the portable level dequantize rows and take float dots.
//
// Determinism contract (the engine's batch invariance rests on it): the value computed for
// one token's row never depends on how many other tokens are in the batch, on their
// contents, or on the number of threads. Kernels may split work across rows and output
// columns, never across the reduction dimension.
//
// All functions are thread-safe; those that take a ThreadPool run on it and must be called
// by the pool's owner.
#pragma once

#include <cstdint>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace koi::kernels {

// y[t, o] = sum_i w[o, i] * x[t, i] for t in [0, n_tokens), o in [0, out).
// w: a 2-D weight view {in, out} of any DType; x: f32 [n_tokens, in]; y: f32 [n_tokens, out].
void matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool);

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight[i], for one row of n values. out may alias x.
void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps);

// Rotary position embedding, in two parts, so that a position's angles are computed once for
// every head and layer that rotates at it. rope_angles: cos_pos[i] = cos(pos * inv_freq[i]) and
// sin_pos[i] likewise (f32 angle), for the head_dim / 2 pairs; inv_freq[i] is the rotation
// frequency of pair i. rope_rotate: in place, n_heads heads of head_dim values rotated by those
// angles. kInterleaved rotates pairs (2i, 2i+1) (Meta / GGUF "llama" layout); kNeox rotates pairs
// (i, i + head_dim/2) (Hugging Face layout, GGUF "qwen2").
enum class RopeStyle { kInterleaved, kNeox };
void rope_angles(int64_t pos, const float* inv_freq, int64_t head_dim, float* cos_pos, float* sin_pos);
void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos_pos, const float* sin_pos,
                 RopeStyle style);

// In place: x = softmax(x) over n values.
void softmax(float* x, int64_t n);

// In place: gate[i] = silu(gate[i]) * up[i]. On `pool` (may be null) when n is large enough to
// pay for it; the result is bitwise the same either way.
void silu_mul(float* gate, const float* up, int64_t n, ThreadPool* pool = nullptr);

// In place: gate[i] = gelu(gate[i]) * up[i], GELU in its tanh form (PyTorch's
// approximate="tanh", Gemma's gelu_pytorch_tanh): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
// Threads as silu_mul.
void gelu_tanh_mul(float* gate, const float* up, int64_t n, ThreadPool* pool = nullptr);

// In place: x[i] = cap * tanh(x[i] / cap) (Gemma 2's attention and final logit soft-capping).
void softcap(float* x, int64_t n, float cap);

// out[i] = 1 / (1 + exp(-x[i])). out may alias x.
void sigmoid(const float* x, float* out, int64_t n);

// Dot product of two f32 vectors.
float dot(const float* a, const float* b, int64_t n);

// y[i] += a * x[i].
void axpy(float a, const float* x, float* y, int64_t n);

namespace ref {
// Scalar references, one for each op above that has a fast variant.
void matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens);
// The K-quant contract (q4_K, q5_K, q6_K weights): x quantized to q8_K, integer sums per
// super-block; what the SIMD levels must reproduce bitwise.
void kquant_matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens);
float dot(const float* a, const float* b, int64_t n);
}  // namespace ref

}  // namespace koi::kernels
