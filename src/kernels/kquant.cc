// K-quant matmul: the scalar reference of the integer contract (kquant.h) and the dispatch to
// the SIMD levels.
#include "kernels/kquant.h"

#include <cmath>
#include <vector>

#include "kernels/ops.h"
#include "kernels/run_rows.h"

namespace koi::kernels {
namespace {

// Low or high 4 bits of the q4_K/q5_K quant byte of value i of a super-block.
int nibble(const uint8_t* qs, int i) {
  const uint8_t byte = qs[32 * (i / 64) + i % 32];
  return i % 64 < 32 ? byte & 0x0F : byte >> 4;
}

float dot_q45_K(DType type, const uint8_t* w_row, const BlockQ8_K* x, int64_t n_blocks) {
  float y = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const uint8_t *scales, *qs, *qh = nullptr;
    uint16_t d, dmin;
    if (type == DType::kQ4_K) {
      const auto* w = reinterpret_cast<const BlockQ4_K*>(w_row) + b;
      scales = w->scales, qs = w->qs, d = w->d, dmin = w->dmin;
    } else {
      const auto* w = reinterpret_cast<const BlockQ5_K*>(w_row) + b;
      scales = w->scales, qs = w->qs, qh = w->qh, d = w->d, dmin = w->dmin;
    }
    int32_t isum = 0, msum = 0;
    for (int j = 0; j < 8; ++j) {
      int sc, m;
      kquant_scale_min(scales, j, &sc, &m);
      int32_t dot = 0;
      for (int i = 32 * j; i < 32 * j + 32; ++i) {
        const int q = nibble(qs, i) | (qh != nullptr ? ((qh[i % 32] >> j) & 1) << 4 : 0);
        dot += q * x[b].qs[i];
      }
      isum += sc * dot;
      msum += m * (x[b].bsums[2 * j] + x[b].bsums[2 * j + 1]);
    }
    y = std::fma(static_cast<float>(isum), f16_to_f32(d) * x[b].d, y);
    y = std::fma(static_cast<float>(msum), -(f16_to_f32(dmin) * x[b].d), y);
  }
  return y;
}

float dot_q6_K(const uint8_t* w_row, const BlockQ8_K* x, int64_t n_blocks) {
  float y = 0.0f;
  for (int64_t b = 0; b < n_blocks; ++b) {
    const auto* w = reinterpret_cast<const BlockQ6_K*>(w_row) + b;
    int32_t isum = 0;
    for (int j = 0; j < 16; ++j) {
      int32_t dot = 0;
      for (int i = 16 * j; i < 16 * j + 16; ++i) {
        const int h = i / 128, k = i % 128 / 32, l = i % 32;
        const uint8_t lbyte = w->ql[64 * h + 32 * (k & 1) + l];
        const int low = k < 2 ? lbyte & 0x0F : lbyte >> 4;
        const int high = (w->qh[32 * h + l] >> (2 * k)) & 3;
        dot += ((low | (high << 4)) - 32) * x[b].qs[i];
      }
      isum += w->scales[j] * dot;
    }
    y = std::fma(static_cast<float>(isum), f16_to_f32(w->d) * x[b].d, y);
  }
  return y;
}

}  // namespace

namespace ref {

float kquant_dot(DType type, const uint8_t* w_row, const BlockQ8_K* x, int64_t n_blocks) {
  return type == DType::kQ6_K ? dot_q6_K(w_row, x, n_blocks) : dot_q45_K(type, w_row, x, n_blocks);
}

void kquant_matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens) {
  const int64_t in = w.ne[0], out = w.ne[1], n_blocks = in / kQK_K;
  std::vector<BlockQ8_K> xq(static_cast<size_t>(n_blocks));
  for (int64_t t = 0; t < n_tokens; ++t) {
    quantize_row_q8_K(x + t * in, xq.data(), in);
    for (int64_t o = 0; o < out; ++o) {
      y[t * out + o] = kquant_dot(w.type, static_cast<const uint8_t*>(w.row(o)), xq.data(), n_blocks);
    }
  }
}

}  // namespace ref

void kquant_matmul(Isa isa, const TensorView& w, const float* x, float* y, int64_t n_tokens, ThreadPool* pool) {
  const int64_t in = w.ne[0], out = w.ne[1];
  MatmulArgs a{w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), nullptr,
               in / kQK_K * int64_t{sizeof(BlockQ8_K)}, y, in, out, n_tokens};
  // Activations are quantized once per call into a per-thread buffer that only grows.
  thread_local std::vector<BlockQ8_K> scratch;
  const size_t need = static_cast<size_t>(n_tokens * (in / kQK_K));
  if (scratch.size() < need) scratch.resize(need);
  BlockQ8_K* xq = scratch.data();
  run_rows(n_tokens > 1 ? pool : nullptr, n_tokens, in * n_tokens, [&](int64_t t_begin, int64_t t_end) {
    for (int64_t t = t_begin; t < t_end; ++t) avx2::quantize_row_q8_K(x + t * in, xq + t * (in / kQK_K), in);
  });
  a.x = reinterpret_cast<const uint8_t*>(xq);
  auto* rows = isa == Isa::kAvx2 ? &avx2::kquant_matmul_rows : &avx512::kquant_matmul_rows;
  run_rows(pool, out, in * out * n_tokens, [&](int64_t o_begin, int64_t o_end) { rows(a, o_begin, o_end); });
}

}  // namespace koi::kernels
