// The AVX2 + FMA + F16C level: 256-bit float and integer dot products, the q8 activation
// quantizer shared by every SIMD level, and the vectorised element-wise ops.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/simd.h"

#pragma GCC target("avx2,fma,f16c")
#include "kernels/simd_exp_inl.h"
#include "kernels/simd_tiles_inl.h"

namespace koi::kernels::avx2 {
namespace {

// Float tiles of 4 rows x 2 tokens: 8 accumulators + 4 weight vectors fit the 16 ymm registers.
// Quantized panel tiles: one vector of 8 rows (half a 16-row panel) x 4 tokens (4 accumulators and
// 4 integer sums; two vectors would not fit the 16 registers).
constexpr int kRows = 4, kTokens = 2, kQuantTokens = 4;
// Small batches over weights that are not packed (PackedMatrix takes the panels at any batch):
// up to kSmallBatchQ8 / kSmallBatchQ4 tokens read the weights as stored,
// kSmallTokens per tile; more pack panels (kernels_bench small_* --isa=avx2: the crossover, one
// core, Zen 4; from 3 tokens the 8-row panels win at this level).
constexpr int kSmallTokens = 2;
constexpr int64_t kSmallBatchQ8 = 2, kSmallBatchQ4 = 2;

template <DType kType>
using FloatK = Float8Kernel<kType, kRows, kTokens>;

float hmax(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_movehdup_ps(m));
  return _mm_cvtss_f32(m);
}

}  // namespace

void quantize_row_q8(const float* x, ActBlockQ8* dst, int64_t n) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
  for (int64_t b = 0; b < n / 32; ++b) {
    __m256 v[4];
    __m256 amax = _mm256_setzero_ps();
    for (int k = 0; k < 4; ++k) {
      v[k] = _mm256_loadu_ps(x + b * 32 + k * 8);
      amax = _mm256_max_ps(amax, _mm256_and_ps(v[k], abs_mask));
    }
    const float d = hmax(amax) / 127.0f;
    const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
    __m256i q[4];
    for (int k = 0; k < 4; ++k) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], id));
    const __m256i sums = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(sums), _mm256_extracti128_si256(sums, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    // packs interleaves 128-bit lanes; the permute restores the order of the 32 values.
    __m256i packed = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]),
                                        _mm256_packs_epi32(q[2], q[3]));
    packed = _mm256_permutevar8x32_epi32(packed, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    dst[b].d = d;
    dst[b].sum = _mm_cvtsi128_si32(s);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst[b].qs), packed);
  }
}

int64_t panel_layout_words(DType type, int64_t in, int64_t out) {
  const int64_t panels = (out + kPanelRows - 1) / kPanelRows;
  return panels * (type == DType::kQ8_0 ? panel_words<DType::kQ8_0>(in / 32) : panel_words<DType::kQ4_0>(in / 32));
}

void pack_panels(const MatmulArgs& a, int64_t row_begin, int64_t row_end, uint32_t* dst) {
  const auto pack = [&]<DType kType>() {
    const int64_t stride = panel_words<kType>(a.in / 32);
    for (int64_t row = row_begin; row < row_end; row += kPanelRows) {
      const int rows = static_cast<int>(std::min<int64_t>(kPanelRows, row_end - row));
      pack_panel<kType>(a, row, rows, dst + row / kPanelRows * stride);
    }
  };
  if (a.type == DType::kQ8_0) {
    pack.template operator()<DType::kQ8_0>();
  } else {
    pack.template operator()<DType::kQ4_0>();
  }
}

void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  switch (a.type) {
    case DType::kF32: return matmul_rows_with<FloatK<DType::kF32>>(a, row_begin, row_end);
    case DType::kF16: return matmul_rows_with<FloatK<DType::kF16>>(a, row_begin, row_end);
    case DType::kBF16: return matmul_rows_with<FloatK<DType::kBF16>>(a, row_begin, row_end);
    case DType::kQ8_0: return quant_matmul_rows<Vec256, MaddubsDot, DType::kQ8_0, 1, kQuantTokens, kSmallTokens, kSmallBatchQ8>(a, row_begin, row_end);
    case DType::kQ4_0: return quant_matmul_rows<Vec256, MaddubsDot, DType::kQ4_0, 1, kQuantTokens, kSmallTokens, kSmallBatchQ4>(a, row_begin, row_end);
    default: return;  // the K-quants: kquant.h
  }
}

float dot(const float* a, const float* b, int64_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) {
      acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    }
  }
  for (; i + 8 <= n; i += 8) {
    acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
  }
  float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  const __m256 va = _mm256_set1_ps(a);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  }
  for (; i < n; ++i) y[i] += a * x[i];
}

void rmsnorm(const float* x, const float* weight, float* out, int64_t n, float eps) {
  float ss = dot(x, x, n);
  const float scale = 1.0f / __builtin_sqrtf(ss / static_cast<float>(n) + eps);
  const __m256 vscale = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vscale);
    _mm256_storeu_ps(out + i, _mm256_mul_ps(v, _mm256_loadu_ps(weight + i)));
  }
  for (; i < n; ++i) out[i] = x[i] * scale * weight[i];
}

void softmax(float* x, int64_t n) {
  __m256 vmax = _mm256_set1_ps(x[0]);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(x + i));
  float max = hmax(vmax);
  for (; i < n; ++i) max = x[i] > max ? x[i] : max;
  vmax = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  for (i = 0; i + 8 <= n; i += 8) {
    __m256 e = exp256(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = hsum(vsum);
  for (; i < n; ++i) {
    x[i] = __builtin_expf(x[i] - max);
    sum += x[i];
  }
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  for (i = 0; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

void silu_mul(float* gate, const float* up, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 g = _mm256_loadu_ps(gate + i);
    __m256 silu = _mm256_div_ps(g, _mm256_add_ps(one, exp256(_mm256_sub_ps(_mm256_setzero_ps(), g))));
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu, _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.0f + __builtin_expf(-gate[i])) * up[i];
}

void sigmoid(const float* x, float* out, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp256(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_loadu_ps(x + i)));
    _mm256_storeu_ps(out + i, _mm256_div_ps(one, _mm256_add_ps(one, e)));
  }
  for (; i < n; ++i) out[i] = 1.0f / (1.0f + __builtin_expf(-x[i]));
}

}  // namespace koi::kernels::avx2
