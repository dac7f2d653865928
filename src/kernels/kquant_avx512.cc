// The AVX-512 (VNNI) level of the K-quant matmul (kquant_tiles_inl.h): maddubs, then vpdpwssd
// (int16 pairs times the sub-block scales, added into int32) in one instruction.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "kernels/kquant.h"

#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512vnni")
#include "kernels/kquant_tiles_inl.h"

namespace koi::kernels::avx512 {
namespace {

struct DpwssdScaled {
  static __m256i madd(__m256i acc, __m256i pairs, __m256i scales) { return _mm256_dpwssd_epi32(acc, pairs, scales); }
};

}  // namespace

void kquant_matmul_rows(const MatmulArgs& a, int64_t row_begin, int64_t row_end) {
  kquant_rows_of_type<DpwssdScaled>(a, row_begin, row_end);
}

}  // namespace koi::kernels::avx512
