#include "tensor/kquants.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "tensor/dtype.h"

namespace koi {
namespace {

// Round to nearest, ties to even (the default rounding mode), as an int.
int round_int(float v) { return static_cast<int>(std::nearbyint(v)); }

// The scale and min of one sub-block of n values for unsigned quants 0..nmax, x ~ scale * q - min
// with min >= 0: weighted least squares over candidate scales (nmax + rmin + rdelta * s) /
// (max - min), s = 0..nstep, each candidate's quants refitted in closed form. Writes the quants
// to q and returns the scale; *min_out gets the min (a positive number to subtract).
float fit_scale_min(const float* x, const float* w, int n, int nmax, float rmin, float rdelta, int nstep,
                    uint8_t* q, float* min_out) {
  float lo = x[0], hi = x[0], sum_w = w[0], sum_x = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_x += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);
  if (hi <= lo) {  // a constant (non-positive) sub-block: everything is the min
    std::fill(q, q + n, 0);
    *min_out = -lo;
    return 0.0f;
  }
  auto error_of = [&](float scale, float min) {
    float err = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_int((x[i] - min) / scale), 0, nmax);
      const float diff = scale * l + min - x[i];
      err += w[i] * diff * diff;
    }
    return err;
  };
  float best_scale = (hi - lo) / nmax, best_min = lo;
  float best_err = error_of(best_scale, best_min);
  for (int s = 0; s <= nstep; ++s) {
    const float iscale = (rmin + rdelta * s + nmax) / (hi - lo);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_int(iscale * (x[i] - lo)), 0, nmax);
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    // Minimise sum w (scale * l + min - x)^2 over scale and min.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (det <= 0) continue;
    float scale = (sum_w * sum_xl - sum_x * sum_l) / det;
    float min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
    if (min > 0) {  // the model keeps min <= 0: refit the scale alone
      min = 0;
      scale = sum_l2 > 0 ? sum_xl / sum_l2 : 0;
    }
    if (scale <= 0) continue;
    const float err = error_of(scale, min);
    if (err < best_err) {
      best_err = err;
      best_scale = scale;
      best_min = min;
    }
  }
  for (int i = 0; i < n; ++i) q[i] = static_cast<uint8_t>(std::clamp(round_int((x[i] - best_min) / best_scale), 0, nmax));
  *min_out = -best_min;
  return best_scale;
}

// Q4_K and Q5_K share everything but the quant width: 8 sub-blocks of 32, scales and mins to 6
// bits, then each value requantized with the rounded sub-block scale. Writes d, dmin, the 12
// scale bytes and the 256 quants (0..nmax).
void quantize_super_block_qk(const float* x, int nmax, float rmin, float rdelta, int nstep, uint16_t* d_out,
                             uint16_t* dmin_out, uint8_t packed[12], uint8_t q[kQK_K]) {
  float scales[8], mins[8];
  float sum_x2 = 0;
  for (int i = 0; i < kQK_K; ++i) sum_x2 += x[i] * x[i];
  const float av_x = std::sqrt(sum_x2 / kQK_K);
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < 8; ++j) {
    float w[32];
    for (int i = 0; i < 32; ++i) w[i] = av_x + std::fabs(x[32 * j + i]);
    scales[j] = fit_scale_min(x + 32 * j, w, 32, nmax, rmin, rdelta, nstep, q + 32 * j, &mins[j]);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  uint8_t ls[8], lm[8];
  for (int j = 0; j < 8; ++j) {
    ls[j] = static_cast<uint8_t>(std::min(63, round_int(inv_scale * scales[j])));
    lm[j] = static_cast<uint8_t>(std::min(63, round_int(inv_min * mins[j])));
  }
  kquant_pack_scale_min(ls, lm, packed);
  *d_out = f32_to_f16(max_scale / 63.0f);
  *dmin_out = f32_to_f16(max_min / 63.0f);
  const float d = f16_to_f32(*d_out), dmin = f16_to_f32(*dmin_out);
  for (int j = 0; j < 8; ++j) {
    const float sd = d * ls[j], sm = dmin * lm[j];
    if (sd == 0) continue;  // keeps the quants of the fit (all values are the min)
    for (int i = 0; i < 32; ++i) {
      q[32 * j + i] = static_cast<uint8_t>(std::clamp(round_int((x[32 * j + i] + sm) / sd), 0, nmax));
    }
  }
}

// Q6_K's signed sub-block scale: x ~ scale * l, l in -32..31, weights x^2, 19 candidate scales.
float fit_scale_signed(const float* x, int n, int8_t* l_out) {
  float amax = 0, max = 0;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  if (amax == 0) {
    std::fill(l_out, l_out + n, 0);
    return 0;
  }
  float best_scale = 0, best_merit = -1;
  for (int s = -9; s <= 9; ++s) {
    const float iscale = -(32 + 0.1f * s) / max;
    float sum_xl = 0, sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(round_int(iscale * x[i]), -32, 31);
      const float w = x[i] * x[i];
      sum_xl += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    // The least-squares scale sum_xl / sum_l2 leaves an error of sum w x^2 - sum_xl^2 / sum_l2.
    if (sum_l2 > 0 && sum_xl * sum_xl / sum_l2 > best_merit) {
      best_merit = sum_xl * sum_xl / sum_l2;
      best_scale = sum_xl / sum_l2;
    }
  }
  for (int i = 0; i < n; ++i) l_out[i] = static_cast<int8_t>(std::clamp(round_int(x[i] / best_scale), -32, 31));
  return best_scale;
}

}  // namespace

void kquant_pack_scale_min(const uint8_t sc[8], const uint8_t m[8], uint8_t scales[12]) {
  std::memset(scales, 0, 12);
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] |= sc[j];
      scales[j + 4] |= m[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((sc[j] & 0x0F) | ((m[j] & 0x0F) << 4));
      scales[j - 4] |= static_cast<uint8_t>((sc[j] >> 4) << 6);
      scales[j] |= static_cast<uint8_t>((m[j] >> 4) << 6);
    }
  }
}

void kquant_q3_scales(const uint8_t scales[12], int out[16]) {
  for (int j = 0; j < 16; ++j) {
    const int low = j < 8 ? scales[j % 8] & 0x0F : scales[j % 8] >> 4;
    const int high = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = low | (high << 4);
  }
}

void dequantize_row_q4_K(const BlockQ4_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      kquant_scale_min(x[b].scales, j, &sc, &m);
      const float scale = d * sc, min = dmin * m;
      const uint8_t* q = x[b].qs + 32 * (j / 2);
      for (int i = 0; i < 32; ++i) y[32 * j + i] = scale * ((j % 2 == 0) ? q[i] & 0x0F : q[i] >> 4) - min;
    }
  }
}

void dequantize_row_q5_K(const BlockQ5_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      kquant_scale_min(x[b].scales, j, &sc, &m);
      const float scale = d * sc, min = dmin * m;
      const uint8_t* q = x[b].qs + 32 * (j / 2);
      for (int i = 0; i < 32; ++i) {
        const int low = (j % 2 == 0) ? q[i] & 0x0F : q[i] >> 4;
        const int high = (x[b].qh[i] >> j) & 1;
        y[32 * j + i] = scale * (low | (high << 4)) - min;
      }
    }
  }
}

void dequantize_row_q6_K(const BlockQ6_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = f16_to_f32(x[b].d);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, k = i % 128 / 32, l = i % 32;
      const uint8_t lbyte = x[b].ql[64 * h + 32 * (k & 1) + l];
      const int low = k < 2 ? lbyte & 0x0F : lbyte >> 4;
      const int high = (x[b].qh[32 * h + l] >> (2 * k)) & 3;
      y[i] = d * x[b].scales[i / 16] * ((low | (high << 4)) - 32);
    }
  }
}

void dequantize_row_q3_K(const BlockQ3_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = f16_to_f32(x[b].d);
    int sc[16];
    kquant_q3_scales(x[b].scales, sc);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, k = i % 128 / 32, l = i % 32;
      const int low = (x[b].qs[32 * h + l] >> (2 * k)) & 3;
      const int high = (x[b].hmask[l] >> (4 * h + k)) & 1;
      y[i] = d * (sc[i / 16] - 32) * ((low | (high << 2)) - 4);
    }
  }
}

void dequantize_row_q2_K(const BlockQ2_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b, y += kQK_K) {
    const float d = f16_to_f32(x[b].d), dmin = f16_to_f32(x[b].dmin);
    for (int i = 0; i < kQK_K; ++i) {
      const int h = i / 128, k = i % 128 / 32, l = i % 32;
      const int q = (x[b].qs[32 * h + l] >> (2 * k)) & 3;
      const uint8_t s = x[b].scales[i / 16];
      y[i] = d * (s & 0x0F) * q - dmin * (s >> 4);
    }
  }
}

void dequantize_row_q8_K(const BlockQ8_K* x, float* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    for (int i = 0; i < kQK_K; ++i) y[b * kQK_K + i] = x[b].d * x[b].qs[i];
  }
}

void quantize_row_q4_K(const float* x, BlockQ4_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t q[kQK_K];
    quantize_super_block_qk(x + b * kQK_K, 15, -1.0f, 0.1f, 20, &y[b].d, &y[b].dmin, y[b].scales, q);
    for (int g = 0; g < 4; ++g) {
      for (int i = 0; i < 32; ++i) y[b].qs[32 * g + i] = static_cast<uint8_t>(q[64 * g + i] | (q[64 * g + 32 + i] << 4));
    }
  }
}

void quantize_row_q5_K(const float* x, BlockQ5_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    uint8_t q[kQK_K];
    quantize_super_block_qk(x + b * kQK_K, 31, -0.5f, 0.1f, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    for (int g = 0; g < 4; ++g) {
      for (int i = 0; i < 32; ++i) {
        const int lo = q[64 * g + i], hi = q[64 * g + 32 + i];
        y[b].qs[32 * g + i] = static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
        y[b].qh[i] |= static_cast<uint8_t>(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
      }
    }
  }
}

void quantize_row_q6_K(const float* x, BlockQ6_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float scales[16];
    int8_t l[kQK_K];
    float amax = 0, max_scale = 0;
    for (int j = 0; j < 16; ++j) {
      scales[j] = fit_scale_signed(xb + 16 * j, 16, l + 16 * j);
      if (std::fabs(scales[j]) > amax) {
        amax = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    std::memset(&y[b], 0, sizeof(BlockQ6_K));
    if (amax == 0) continue;
    const float iscale = -128.0f / max_scale;
    y[b].d = f32_to_f16(1.0f / iscale);
    const float d = f16_to_f32(y[b].d);
    for (int j = 0; j < 16; ++j) {
      y[b].scales[j] = static_cast<int8_t>(std::clamp(round_int(iscale * scales[j]), -128, 127));
      const float sd = d * y[b].scales[j];
      for (int i = 0; i < 16; ++i) {
        const int q = sd == 0 ? 0 : std::clamp(round_int(xb[16 * j + i] / sd), -32, 31);
        l[16 * j + i] = static_cast<int8_t>(q);
      }
    }
    for (int i = 0; i < kQK_K; ++i) {
      const int q = l[i] + 32;  // 0..63
      const int h = i / 128, k = i % 128 / 32, li = i % 32;
      uint8_t& lbyte = y[b].ql[64 * h + 32 * (k & 1) + li];
      lbyte |= static_cast<uint8_t>(k < 2 ? (q & 0x0F) : (q & 0x0F) << 4);
      y[b].qh[32 * h + li] |= static_cast<uint8_t>((q >> 4) << (2 * k));
    }
  }
}

void quantize_row_q8_K(const float* x, BlockQ8_K* y, int64_t n) {
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* xb = x + b * kQK_K;
    float amax = 0, max = 0;
    for (int i = 0; i < kQK_K; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        max = xb[i];
      }
    }
    if (amax == 0) {
      std::memset(&y[b], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQK_K; ++i) y[b].qs[i] = static_cast<int8_t>(std::min(127, round_int(iscale * xb[i])));
    for (int g = 0; g < kQK_K / 16; ++g) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * g + i];
      y[b].bsums[g] = static_cast<int16_t>(sum);
    }
    y[b].d = 1.0f / iscale;
  }
}

}  // namespace koi
