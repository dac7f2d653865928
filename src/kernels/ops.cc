// The public entry points: each dispatches on active_isa() to a SIMD level (simd.h) or to the
// portable code below, which runs anywhere and serves ops that have no SIMD variant.
#include "kernels/ops.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>
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

// The arguments of one matmul of w (panels: w in the panel layout, or null) over x as floats.
MatmulArgs matmul_args(const TensorView& w, const uint32_t* panels, const float* x, float* y, int64_t n_tokens) {
  const int64_t in = w.ne[0];
  return MatmulArgs{w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), reinterpret_cast<const uint8_t*>(x),
                    in * 4, y, in, w.ne[1], n_tokens, panels};
}

// Points every a[i] (one weight type, one input) at the input converted to the activation type
// the level takes for that weight type, when it is not f32. The conversion is done once per call
// into a per-thread buffer that only grows, so the decode path does not allocate after the first
// step.
void convert_activations(Isa isa, std::span<MatmulArgs> a, ThreadPool* pool) {
  const DType act = activation_type(isa, a[0].type);
  if (act == DType::kF32) return;
  const int64_t in = a[0].in, n_tokens = a[0].n_tokens;
  const auto* x = reinterpret_cast<const float*>(a[0].x);
  thread_local std::vector<uint8_t> scratch;
  const int64_t row_bytes = act == DType::kQ8_0 ? in / kQK8_0 * int64_t{sizeof(ActBlockQ8)} : in * 2;
  const size_t need = static_cast<size_t>(n_tokens * row_bytes);
  if (scratch.size() < need) scratch.resize(need);
  uint8_t* dst = scratch.data();
  // A value's conversion (block maximum, scale, round, pack, sum) counted as 16 multiply-adds
  // (a 2048-wide row takes about 0.3 us on one Zen 4/5 thread), so the pool takes 8K values and
  // up: from 4 rows of 2048.
  run_rows(n_tokens > 1 ? pool : nullptr, n_tokens, 16 * in * n_tokens, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) {
      uint8_t* row = dst + t * row_bytes;
      if (act == DType::kQ8_0) {
        avx2::quantize_row_q8(x + t * in, reinterpret_cast<ActBlockQ8*>(row), in);
      } else {
        auto* h = reinterpret_cast<uint16_t*>(row);
        for (int64_t i = 0; i < in; ++i) h[i] = f32_to_bf16(x[t * in + i]);
      }
    }
  });
  for (MatmulArgs& m : a) {
    m.x = dst;
    m.x_row_bytes = row_bytes;
  }
}

// The rows of every a[i] through the level's tiles, in one parallel region. Threads take
// contiguous ranges of 32-row groups (the matrices' groups one after another), so that tiles are
// full: quantized tiles hold 32 rows at AVX-512 (two 16-row panels) and 8 at AVX2; float tiles 6
// at AVX-512, 4 at AVX2. With 16-row groups, every range of an odd number of them ended in a tile
// of one panel, which broadcasts each activation word for half as many rows: 4-5% of the
// 32-sequence step's samples sat in such tiles (bench/README.md, stop 30).
void simd_matmul(Isa isa, std::span<MatmulArgs> a, ThreadPool* pool) {
  convert_activations(isa, a, pool);
  auto* rows = isa == Isa::kAvx2     ? &avx2::matmul_rows
               : isa == Isa::kAvx512 ? &avx512::matmul_rows
                                     : &avx512bf16::matmul_rows;
  constexpr int64_t kGroup = 32;
  std::array<int64_t, 4> first_group{};  // first_group[i]: the first group of a[i] in the region
  KOI_CHECK(a.size() < first_group.size());
  int64_t work = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    first_group[i + 1] = first_group[i] + (a[i].out + kGroup - 1) / kGroup;
    work += a[i].in * a[i].out * a[i].n_tokens;
  }
  run_rows(pool, first_group[a.size()], work, [&](int64_t g_begin, int64_t g_end) {
    for (size_t i = 0; i < a.size(); ++i) {
      const int64_t begin = std::max(g_begin, first_group[i]), end = std::min(g_end, first_group[i + 1]);
      if (begin >= end) continue;
      rows(a[i], (begin - first_group[i]) * kGroup, std::min((end - first_group[i]) * kGroup, a[i].out));
    }
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
    MatmulArgs a = matmul_args(w, nullptr, x, y, n_tokens);
    simd_matmul(isa, std::span(&a, 1), pool);
  }
}

void matmul(const PackedMatrix& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool) {
  const Isa isa = active_isa();
  if (w.panels() == nullptr || isa == Isa::kPortable) return matmul(w.view(), x, y, n_tokens, pool);
  MatmulArgs a = matmul_args(w.view(), w.panels(), x, y, n_tokens);
  simd_matmul(isa, std::span(&a, 1), pool);
}

void matmul(std::span<const PackedMatrix* const> w, const float* x, std::span<float* const> y, int64_t n_tokens,
            ThreadPool* pool) {
  KOI_CHECK(w.size() == y.size());
  if (w.empty()) return;
  const Isa isa = active_isa();
  std::array<MatmulArgs, 3> args;
  bool together = isa != Isa::kPortable && w.size() <= args.size();
  for (size_t i = 0; together && i < w.size(); ++i) {
    const TensorView& v = w[i]->view();
    together = w[i]->panels() != nullptr && v.type == w[0]->view().type && v.ne[0] == w[0]->view().ne[0];
    if (together) args[i] = matmul_args(v, w[i]->panels(), x, y[i], n_tokens);
  }
  if (!together) {
    for (size_t i = 0; i < w.size(); ++i) matmul(*w[i], x, y[i], n_tokens, pool);
    return;
  }
  simd_matmul(isa, std::span(args.data(), w.size()), pool);
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

void rope_angles(int64_t pos, const float* inv_freq, int64_t head_dim, float* cos_pos, float* sin_pos) {
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    const float angle = static_cast<float>(pos) * inv_freq[i];
    cos_pos[i] = std::cos(angle);
    sin_pos[i] = std::sin(angle);
  }
}

void rope_rotate(float* x, int64_t n_heads, int64_t head_dim, const float* cos_pos, const float* sin_pos,
                 RopeStyle style) {
  const int64_t half = head_dim / 2;
  for (int64_t head_idx = 0; head_idx < n_heads; ++head_idx) {
    float* h = x + head_idx * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const int64_t a = style == RopeStyle::kInterleaved ? 2 * i : i;
      const int64_t b = style == RopeStyle::kInterleaved ? 2 * i + 1 : i + half;
      const float x0 = h[a], x1 = h[b], c = cos_pos[i], s = sin_pos[i];
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

namespace {

// fn(begin, end) over [0, n) in ranges that start at multiples of 64 values (so a vector loop's
// scalar tail is the same values however [0, n) is split), on `pool` when n values of an
// activation function (counted as 16 multiply-adds each) are worth waking it.
void elementwise(int64_t n, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn) {
  constexpr int64_t kChunk = 64;
  run_rows(pool, (n + kChunk - 1) / kChunk, 16 * n,
           [&](int64_t c_begin, int64_t c_end) { fn(c_begin * kChunk, std::min(c_end * kChunk, n)); });
}

}  // namespace

void silu_mul(float* gate, const float* up, int64_t n, ThreadPool* pool) {
  elementwise(n, pool, [&](int64_t begin, int64_t end) {
    if (active_isa() != Isa::kPortable) return avx2::silu_mul(gate + begin, up + begin, end - begin);
    for (int64_t i = begin; i < end; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
  });
}

void gelu_tanh_mul(float* gate, const float* up, int64_t n, ThreadPool* pool) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  elementwise(n, pool, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float x = gate[i];
      gate[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x))) * up[i];
    }
  });
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
