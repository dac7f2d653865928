#include "tensor/dtype.h"

#include <algorithm>
#include <cmath>

#include "base/check.h"
#include "tensor/kquants.h"

namespace koi {

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kQ8_0: return "q8_0";
    case DType::kQ4_0: return "q4_0";
    case DType::kQ2_K: return "q2_K";
    case DType::kQ3_K: return "q3_K";
    case DType::kQ4_K: return "q4_K";
    case DType::kQ5_K: return "q5_K";
    case DType::kQ6_K: return "q6_K";
    case DType::kQ8_K: return "q8_K";
  }
  return "unknown";
}

std::optional<DType> dtype_from_name(std::string_view name) {
  auto lower = [](char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; };
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16, DType::kQ8_0, DType::kQ4_0, DType::kQ2_K, DType::kQ3_K,
                  DType::kQ4_K, DType::kQ5_K, DType::kQ6_K, DType::kQ8_K}) {
    const std::string_view n = dtype_name(t);
    if (n.size() == name.size() && std::equal(n.begin(), n.end(), name.begin(),
                                              [&](char a, char b) { return lower(a) == lower(b); })) {
      return t;
    }
  }
  return std::nullopt;
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 15: return DType::kQ8_K;
    case 30: return DType::kBF16;
    default: return std::nullopt;
  }
}

int64_t dtype_block_size(DType t) {
  switch (t) {
    case DType::kQ8_0: return kQK8_0;
    case DType::kQ4_0: return kQK4_0;
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kQ8_K: return kQK_K;
    default: return 1;
  }
}

int64_t dtype_block_bytes(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kF16:
    case DType::kBF16: return 2;
    case DType::kQ8_0: return sizeof(BlockQ8_0);
    case DType::kQ4_0: return sizeof(BlockQ4_0);
    case DType::kQ2_K: return sizeof(BlockQ2_K);
    case DType::kQ3_K: return sizeof(BlockQ3_K);
    case DType::kQ4_K: return sizeof(BlockQ4_K);
    case DType::kQ5_K: return sizeof(BlockQ5_K);
    case DType::kQ6_K: return sizeof(BlockQ6_K);
    case DType::kQ8_K: return sizeof(BlockQ8_K);
  }
  return 0;
}

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t exp = (x >> 23) & 0xFFu;
  uint32_t mant = x & 0x7FFFFFu;
  if (exp == 0xFF) return static_cast<uint16_t>(sign | 0x7C00u | (mant ? 0x200u : 0u));  // inf/nan
  int32_t e = static_cast<int32_t>(exp) - 127 + 15;
  if (e >= 0x1F) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow -> inf
  if (e <= 0) {
    if (e < -10) return static_cast<uint16_t>(sign);  // underflow -> signed zero
    mant |= 0x800000u;
    uint32_t shift = static_cast<uint32_t>(14 - e);
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1);
    uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t half = sign | (static_cast<uint32_t>(e) << 10) | (mant >> 13);
  uint32_t rem = mant & 0x1FFFu;
  if (rem > 0x1000u || (rem == 0x1000u && (half & 1u))) ++half;  // may carry into exponent: correct
  return static_cast<uint16_t>(half);
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  uint32_t bits;
  if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        mant <<= 1;
        ++e;
      } while ((mant & 0x400u) == 0);
      bits = sign | (static_cast<uint32_t>(127 - 15 - e) << 23) | ((mant & 0x3FFu) << 13);
    }
  } else if (exp == 0x1F) {
    bits = sign | 0x7F800000u | (mant << 13);
  } else {
    bits = sign | ((exp + 127 - 15) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

uint16_t f32_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet nan
  x += 0x7FFFu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

void quantize_row(DType t, const float* src, void* dst, int64_t n) {
  KOI_CHECK(n % dtype_block_size(t) == 0);
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
    case DType::kBF16: {
      auto* d = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* blocks = static_cast<BlockQ8_0*>(dst);
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        const float* x = src + b * kQK8_0;
        float amax = 0.0f;
        for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = f32_to_f16(d);
        for (int j = 0; j < kQK8_0; ++j) blocks[b].qs[j] = static_cast<int8_t>(std::lround(x[j] * id));
      }
      return;
    }
    case DType::kQ4_0: {
      auto* blocks = static_cast<BlockQ4_0*>(dst);
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        const float* x = src + b * kQK4_0;
        float amax = 0.0f, max = 0.0f;  // max keeps the sign of the largest magnitude
        for (int j = 0; j < kQK4_0; ++j) {
          if (std::fabs(x[j]) > amax) {
            amax = std::fabs(x[j]);
            max = x[j];
          }
        }
        float d = max / -8.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        blocks[b].d = f32_to_f16(d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          int q0 = std::min(15, static_cast<int>(x[j] * id + 8.5f));
          int q1 = std::min(15, static_cast<int>(x[j + kQK4_0 / 2] * id + 8.5f));
          blocks[b].qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
        }
      }
      return;
    }
    case DType::kQ4_K: return quantize_row_q4_K(src, static_cast<BlockQ4_K*>(dst), n);
    case DType::kQ5_K: return quantize_row_q5_K(src, static_cast<BlockQ5_K*>(dst), n);
    case DType::kQ6_K: return quantize_row_q6_K(src, static_cast<BlockQ6_K*>(dst), n);
    case DType::kQ8_K: return quantize_row_q8_K(src, static_cast<BlockQ8_K*>(dst), n);
    case DType::kQ2_K:
    case DType::kQ3_K: KOI_CHECK(false && "q2_K and q3_K are read only"); return;
  }
}

void dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  KOI_CHECK(n % dtype_block_size(t) == 0);
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return;
    case DType::kF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return;
    }
    case DType::kBF16: {
      auto* s = static_cast<const uint16_t*>(src);
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return;
    }
    case DType::kQ8_0: {
      auto* blocks = static_cast<const BlockQ8_0*>(src);
      for (int64_t b = 0; b < n / kQK8_0; ++b) {
        float d = f16_to_f32(blocks[b].d);
        for (int j = 0; j < kQK8_0; ++j) dst[b * kQK8_0 + j] = blocks[b].qs[j] * d;
      }
      return;
    }
    case DType::kQ4_0: {
      auto* blocks = static_cast<const BlockQ4_0*>(src);
      for (int64_t b = 0; b < n / kQK4_0; ++b) {
        float d = f16_to_f32(blocks[b].d);
        for (int j = 0; j < kQK4_0 / 2; ++j) {
          dst[b * kQK4_0 + j] = ((blocks[b].qs[j] & 0x0F) - 8) * d;
          dst[b * kQK4_0 + j + kQK4_0 / 2] = ((blocks[b].qs[j] >> 4) - 8) * d;
        }
      }
      return;
    }
    case DType::kQ2_K: return dequantize_row_q2_K(static_cast<const BlockQ2_K*>(src), dst, n);
    case DType::kQ3_K: return dequantize_row_q3_K(static_cast<const BlockQ3_K*>(src), dst, n);
    case DType::kQ4_K: return dequantize_row_q4_K(static_cast<const BlockQ4_K*>(src), dst, n);
    case DType::kQ5_K: return dequantize_row_q5_K(static_cast<const BlockQ5_K*>(src), dst, n);
    case DType::kQ6_K: return dequantize_row_q6_K(static_cast<const BlockQ6_K*>(src), dst, n);
    case DType::kQ8_K: return dequantize_row_q8_K(static_cast<const BlockQ8_K*>(src), dst, n);
  }
}

}  // namespace koi
