// The public entry points: each dispatches on active_isa() to a SIMD level (simd.h) or to the
// portable code below, which runs anywhere and serves ops that have no SIMD variant.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/check.h"
#include "kernels/isa.h"
#include "kernels/kquant.h"
#include "kernels/packed_matrix.h"
#include "kernels/run_rows.h"
#include "kernels/simd.h"

namespace koi::kernels {
namespace {

float portable_dot(const float* a, const float* b, int64_t n) {
  // Eight independent accumulators, combined in a fixed order: deterministic and vectorisable.
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
  }
  float s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void portable_matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens,
                     ThreadPool* pool) {
  const int64_t in = w.ne[0], out = w.ne[1];
  run_rows(pool, out, in * out * n_tokens, [&](int64_t o_begin, int64_t o_end) {
    thread_local std::vector<float> row;
    row.resize(static_cast<size_t>(in));
    for (int64_t o = o_begin; o < o_end; ++o) {
      const float* wr;
      if (w.type == DType::kF32) {
        wr = reinterpret_cast<const float*>(w.row(o));
      } else {
        dequantize_row(w.type, w.row(o), row.data(), in);
        wr = row.data();
      }
      for (int64_t t = 0; t < n_tokens; ++t) y[t * out + o] = portable_dot(wr, x + t * in, in);
    }
  });
}

// The type a SIMD level converts activations to before the dots (kF32: used as they are).
DType activation_type(Isa isa, DType weight_type) {
  if (weight_type == DType::kQ8_0 || weight_type == DType::kQ4_0) return DType::kQ8_0;
  if (weight_type == DType::kBF16 && isa == Isa::kAvx512Bf16) return DType::kBF16;
  return DType::kF32;
}

// panels: w in the panel layout (PackedMatrix), or null.
void simd_matmul(Isa isa, const TensorView& w, const uint32_t* panels, const float* x, float* y, int64_t n_tokens,
                 ThreadPool* pool) {
  const int64_t in = w.ne[0], out = w.ne[1];
  MatmulArgs a{w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(),
               reinterpret_cast<const uint8_t*>(x), in * 4, y, in, out, n_tokens, panels};
  const DType act = activation_type(isa, w.type);
  if (act != DType::kF32) {
    // Activations are converted once per call into a per-thread buffer that only grows, so the
    // decode path does not allocate after the first step.
    thread_local std::vector<uint8_t> scratch;
    a.x_row_bytes = act == DType::kQ8_0 ? in / kQK8_0 * int64_t{sizeof(ActBlockQ8)} : in * 2;
    const size_t need = static_cast<size_t>(n_tokens * a.x_row_bytes);
    if (scratch.size() < need) scratch.resize(need);
    uint8_t* dst = scratch.data();
    run_rows(n_tokens > 1 ? pool : nullptr, n_tokens, in * n_tokens, [&](int64_t t_begin, int64_t t_end) {
      for (int64_t t = t_begin; t < t_end; ++t) {
        uint8_t* row = dst + t * a.x_row_bytes;
        if (act == DType::kQ8_0) {
          avx2::quantize_row_q8(x + t * in, reinterpret_cast<ActBlockQ8*>(row), in);
        } else {
          auto* h = reinterpret_cast<uint16_t*>(row);
          for (int64_t i = 0; i < in; ++i) h[i] = f32_to_bf16(x[t * in + i]);
        }
      }
    });
    a.x = dst;
  }
  auto* rows = isa == Isa::kAvx2     ? &avx2::matmul_rows
               : isa == Isa::kAvx512 ? &avx512::matmul_rows
                                     : &avx512bf16::matmul_rows;
  // Threads take contiguous ranges of 16-row groups, so that tiles are full (quantized tiles
  // hold 16 rows at AVX-512, 8 at AVX2; float tiles 6 at AVX-512, 4 at AVX2).
  constexpr int64_t kGroup = 16;
  run_rows(pool, (out + kGroup - 1) / kGroup, in * out * n_tokens, [&](int64_t g_begin, int64_t g_end) {
    rows(a, g_begin * kGroup, std::min(g_end * kGroup, out));
  });
}

}  // namespace

void matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool) {
  KOI_CHECK(w.ne[0] % dtype_block_size(w.type) == 0);
  const Isa isa = active_isa();
  if (isa == Isa::kPortable || (dtype_is_kquant(w.type) && !kquant_has_kernels(w.type))) {
    portable_matmul(w, x, y, n_tokens, pool);
  } else if (dtype_is_kquant(w.type)) {
    kquant_matmul(isa, w, x, y, n_tokens, pool);
  } else {
    simd_matmul(isa, w, nullptr, x, y, n_tokens, pool);
  }
}

void matmul(const PackedMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool) {
  const Isa isa = active_isa();
  if (w.panels() == nullptr || isa == Isa::kPortable) return matmul(w.view(), x, y, n_tokens, pool);
  simd_matmul(isa, w.view(), w.panels(), x, y, n_tokens, pool);
}

float dot(const float* a, const float* b, int64_t n) {
  return active_isa() == Isa::kPortable ? portable_dot(a, b, n) : avx2::dot(a, b, n);
}

void axpy(float a, const float* x, float* y, int64_t n) {
  if (active_isa() != Isa::kPortable) return avx2::axpy(a, x, y, n);
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  if (active_isa() != Isa::kPortable) return avx2::rmsnorm(x, weight, out, n, eps);
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  float scale = 1.0f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void rope(float* x, int64_t n_heads, int64_t head_dim, int64_t pos, const float* inv_freq,
          RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < half; ++i) {
    float angle = static_cast<float>(pos) * inv_freq[i];
    float c = std::cos(angle), s = std::sin(angle);
    for (int64_t head_idx = 0; head_idx < n_heads; ++head_idx) {
      float* h = x + head_idx * head_dim;
      int64_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
      int64_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      float x0 = h[a], x1 = h[b];
      h[a] = x0 * c - x1 * s;
      h[b] = x0 * s + x1 * c;
    }
  }
}

void softmax(float* x, int64_t n) {
  if (active_isa() != Isa::kPortable) return avx2::softmax(x, n);
  float max = x[0];
  for (int64_t i = 1; i < n; ++i) max = std::max(max, x[i]);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - max);
    sum += x[i];
  }
  float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  if (active_isa() != Isa::kPortable) return avx2::silu_mul(gate, up, n);
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    gate[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
  }
}

void softcap(float* x, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] * inv);
}

void sigmoid(const float* x, float* out, int64_t n) {
  if (active_isa() != Isa::kPortable) return avx2::sigmoid(x, out, n);
  for (int64_t i = 0; i < n; ++i) out[i] = 1.0f / (1.0f + std::exp(-x[i]));
}

}  // namespace koi::kernels
