// The sgemm driver (gemm.h): hands out MR-row panels of C to the threads; each sweeps its
// panel across the NR-column panels of B with the active level's micro-kernel
// (gemm_kernels.h). The kernels read A and B in place where their layout allows (A row- or
// column-major, B with contiguous rows), so most products copy nothing. What does not fit is
// packed first: B with strided rows (x W^T reads W by columns) into panels shared by all
// threads, a partial last column panel of B and a partial last row panel of A zero-padded.
// Tiles at the matrix edges run into a small buffer and copy back the valid part.
#include "kernels/gemm.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/gemm_kernels.h"
#include "kernels/isa.h"
#include "kernels/run_rows.h"

namespace koi::kernels {
namespace {

constexpr int kPortableMr = 4, kPortableNr = 16;
constexpr int kMaxTile = 12 * 32;  // the largest MR x NR of any level

template <bool kRowMajorA>
void portable_tile(int64_t K, const float* a, int64_t lda, const float* b, int64_t ldb, float* c, int64_t ldc,
                   bool accumulate) {
  float acc[kPortableMr][kPortableNr] = {};
  for (int64_t k = 0; k < K; ++k) {
    for (int i = 0; i < kPortableMr; ++i) {
      const float ai = kRowMajorA ? a[i * lda + k] : a[k * lda + i];
      for (int j = 0; j < kPortableNr; ++j) acc[i][j] = std::fma(ai, b[k * ldb + j], acc[i][j]);
    }
  }
  for (int i = 0; i < kPortableMr; ++i) {
    for (int j = 0; j < kPortableNr; ++j) c[i * ldc + j] = accumulate ? c[i * ldc + j] + acc[i][j] : acc[i][j];
  }
}

GemmKernel active_kernel() {
  const Isa isa = active_isa();
  if (isa >= Isa::kAvx512) return avx512::gemm_kernel();
  if (isa >= Isa::kAvx2) return avx2::gemm_kernel();
  return {kPortableMr, kPortableNr, portable_tile<true>, portable_tile<false>};
}

float at(const StridedMatrix& m, int64_t r, int64_t c) { return m.data[r * m.row_stride + c * m.col_stride]; }

}  // namespace

void sgemm(int64_t M, int64_t N, int64_t K, StridedMatrix a, StridedMatrix b, float* c, int64_t ldc,
           bool accumulate, ThreadPool* pool) {
  if (M <= 0 || N <= 0) return;
  if (K <= 0) {
    if (!accumulate) {
      for (int64_t i = 0; i < M; ++i) std::fill_n(c + i * ldc, N, 0.0f);
    }
    return;
  }
  const GemmKernel kernel = active_kernel();
  const int64_t mr = kernel.mr, nr = kernel.nr;
  const int64_t n_panels = (N + nr - 1) / nr, m_panels = (M + mr - 1) / mr;
  const int64_t work = M * N * K;

  // Column panels of B read in place (contiguous rows) or packed: packed_b[(p K + k) nr + j].
  const bool b_in_place = b.col_stride == 1;
  const int64_t first_packed = b_in_place ? N / nr : 0;
  // (thread_local names the calling thread's buffer here; the workers use it through the pointer.)
  thread_local std::vector<float> packed_b_buffer;
  packed_b_buffer.resize(static_cast<size_t>((n_panels - first_packed) * K * nr));
  float* const packed_b = packed_b_buffer.data();
  run_rows(pool, n_panels - first_packed, work, [&](int64_t begin, int64_t end) {
    for (int64_t p = first_packed + begin; p < first_packed + end; ++p) {
      float* dst = packed_b + (p - first_packed) * K * nr;
      const int64_t cols = std::min(nr, N - p * nr);
      for (int64_t k = 0; k < K; ++k) {
        for (int64_t j = 0; j < cols; ++j) dst[k * nr + j] = at(b, k, p * nr + j);
        std::fill(dst + k * nr + cols, dst + (k + 1) * nr, 0.0f);
      }
    }
  });

  const bool a_row_major = a.col_stride == 1, a_col_major = a.row_stride == 1;
  run_rows(pool, m_panels, work, [&](int64_t begin, int64_t end) {
    thread_local std::vector<float> packed_a;
    float edge[kMaxTile] = {};
    for (int64_t ip = begin; ip < end; ++ip) {
      const int64_t rows = std::min(mr, M - ip * mr);
      const float* pa;
      int64_t lda;
      GemmTileFn tile;
      if (rows == mr && a_row_major) {
        pa = a.data + ip * mr * a.row_stride, lda = a.row_stride, tile = kernel.rows;
      } else if (rows == mr && a_col_major) {
        pa = a.data + ip * mr, lda = a.col_stride, tile = kernel.columns;
      } else {  // packed, zero-padded: packed_a[k mr + i]
        packed_a.resize(static_cast<size_t>(K * mr));
        for (int64_t k = 0; k < K; ++k) {
          for (int64_t i = 0; i < mr; ++i) packed_a[static_cast<size_t>(k * mr + i)] = i < rows ? at(a, ip * mr + i, k) : 0.0f;
        }
        pa = packed_a.data(), lda = mr, tile = kernel.columns;
      }
      for (int64_t jp = 0; jp < n_panels; ++jp) {
        const int64_t cols = std::min(nr, N - jp * nr);
        const bool packed = jp >= first_packed;
        const float* pb = packed ? packed_b + (jp - first_packed) * K * nr : b.data + jp * nr;
        const int64_t ldb = packed ? nr : b.row_stride;
        float* tile_c = c + ip * mr * ldc + jp * nr;
        if (rows == mr && cols == nr) {
          tile(K, pa, lda, pb, ldb, tile_c, ldc, accumulate);
          continue;
        }
        for (int64_t i = 0; i < rows; ++i) std::copy_n(tile_c + i * ldc, cols, edge + i * nr);
        tile(K, pa, lda, pb, ldb, edge, nr, accumulate);
        for (int64_t i = 0; i < rows; ++i) std::copy_n(edge + i * nr, cols, tile_c + i * ldc);
      }
    }
  });
}

namespace ref {

void sgemm(int64_t M, int64_t N, int64_t K, StridedMatrix a, StridedMatrix b, float* c, int64_t ldc,
           bool accumulate) {
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k) s = std::fma(at(a, i, k), at(b, k, j), s);
      c[i * ldc + j] = accumulate ? c[i * ldc + j] + s : s;
    }
  }
}

}  // namespace ref

}  // namespace koi::kernels
