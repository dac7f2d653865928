// The AVX512-BF16 level: bf16 weights against bf16-rounded activations with vdpbf16ps (two
// products per f32 lane per instruction, as llama.cpp does); every other type as avx512.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>
#include <vector>

#include "kernels/simd.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni,avx512bf16")
#define KOI_KERNELS_AVX512
#include "kernels/simd_tiles_inl.h"

namespace koi::kernels::avx512bf16 {
namespace {

struct Bf16Kernel {
  static constexpr int kStep = 32, kMaxRows = 4, kMaxTokens = 4;
  using Acc = __m512;
  using W = __m512bh;
  using X = __m512bh;
  static Acc zero() { return _mm512_setzero_ps(); }
  static __m512bh load(const uint8_t* row, int64_t step) {
    return reinterpret_cast<__m512bh>(
        _mm512_loadu_si512(reinterpret_cast<const __m512i*>(row) + step));
  }
  static W load_w(const uint8_t* row, int64_t step) { return load(row, step); }
  static X load_x(const uint8_t* row, int64_t step) { return load(row, step); }
  static Acc madd(W w, X x, Acc acc) { return _mm512_dpbf16_ps(acc, w, x); }
  static float finish(Acc acc, const uint8_t* w_row, const uint8_t* x_row, int64_t in) {
    float sum = hsum(acc);
    for (int64_t i = in / kStep * kStep; i < in; ++i) {
      sum += float_weight(DType::kBF16, w_row, i) * float_weight(DType::kBF16, x_row, i);
    }
    return sum;
  }
};

}  // namespace

void matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  if (a.type != DType::kBF16) return avx512::matmul_rows(a, row_begin, row_end);
  matmul_rows_with<Bf16Kernel>(a, row_begin, row_end);
}

}  // namespace koi::kernels::avx512bf16
