// Portable kernels. Fast (SIMD) variants plug in behind these entry points.
#include "kernels/ops.h"

#include <cmath>
#include <vector>

namespace koi::kernels {

void matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool) {
  const int64_t in = w.ne[0], out = w.ne[1];
  auto work = [&](int64_t o_begin, int64_t o_end) {
    std::vector<float> row(static_cast<size_t>(in));
    for (int64_t o = o_begin; o < o_end; ++o) {
      const float* wr;
      if (w.type == DType::kF32) {
        wr = reinterpret_cast<const float*>(w.row(o));
      } else {
        dequantize_row(w.type, w.row(o), row.data(), in);
        wr = row.data();
      }
      for (int64_t t = 0; t < n_tokens; ++t) y[t * out + o] = dot(wr, x + t * in, in);
    }
  };
  if (pool != nullptr) {
    pool->parallel_for(out, work);
  } else {
    work(0, out);
  }
}

float dot(const float* a, const float* b, int64_t n) {
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

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
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
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

}  // namespace koi::kernels
