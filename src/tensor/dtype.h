// DType: the element types of weights and activations, with the GGML/GGUF type ids so
// that a GGUF tensor's type field maps one to one. Quantized types are stored in blocks
// (32 values per block for Q8_0 and Q4_0, 256 for the K-quants of kquants.h, in the ggml
// layout); row lengths of quantized tensors must be a multiple of the block size.
//
// The conversion functions are the scalar reference for every fast kernel: pure,
// thread-safe, no allocation.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace koi {

enum class DType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kQ8_K = 15,  // activations of the K-quant dot products; not a weight type
  kBF16 = 30,
};

constexpr int kQK8_0 = 32;
constexpr int kQK4_0 = 32;

struct BlockQ8_0 {
  uint16_t d;  // fp16 scale
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {
  uint16_t d;                // fp16 scale
  uint8_t qs[kQK4_0 / 2];    // low nibbles: values 0..15, high nibbles: values 16..31
};
static_assert(sizeof(BlockQ4_0) == 18);

// "f32", "f16", "bf16", "q8_0", "q4_0", "q2_K" .. "q6_K", "q8_K" (ggml's spelling).
std::string_view dtype_name(DType t);
// Any of those names, ignoring case ("q4_k" too).
std::optional<DType> dtype_from_name(std::string_view name);
// The K-quant types (256-value super-blocks).
inline bool dtype_is_kquant(DType t) {
  return t == DType::kQ2_K || t == DType::kQ3_K || t == DType::kQ4_K || t == DType::kQ5_K || t == DType::kQ6_K ||
         t == DType::kQ8_K;
}
// Maps a GGUF/GGML type id; nullopt for types Koi does not support.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
// Values per block (1 for plain types) and bytes per block.
int64_t dtype_block_size(DType t);
int64_t dtype_block_bytes(DType t);
// Bytes of a row of n values; n must be a multiple of the block size.
inline int64_t dtype_row_bytes(DType t, int64_t n) {
  return n / dtype_block_size(t) * dtype_block_bytes(t);
}

// fp16 / bf16 <-> f32, round to nearest even.
uint16_t f32_to_f16(float f);
float f16_to_f32(uint16_t h);
inline float bf16_to_f32(uint16_t h) {
  uint32_t bits = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}
uint16_t f32_to_bf16(float f);

// Converts a row of n f32 values into type t (dst holds dtype_row_bytes(t, n) bytes). Q2_K and
// Q3_K have no quantizer (read only): passing them is a programmer error.
void quantize_row(DType t, const float* src, void* dst, int64_t n);
// Converts a row of n values of type t into f32.
void dequantize_row(DType t, const void* src, float* dst, int64_t n);

}  // namespace koi
