// The AVX2 level of the K-quant matmul (kquant_tiles_inl.h): maddubs, then madd + add by the
// sub-block scales.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kquant.h"

#pragma GCC target("avx2,fma,f16c")
#include "kernels/kquant_tiles_inl.h"

namespace koi::kernels::avx2 {
namespace {

struct MaddScaled {
  static __m256i madd(__m256i acc, __m256i pairs, __m256i scales) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, scales));
  }
};

}  // namespace

void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  kquant_rows_of_type<MaddScaled>(a, row_begin, row_end);
}

}  // namespace koi::kernels::avx2
