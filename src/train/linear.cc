#include "train/linear.h"

#include "kernels/gemm.h"

namespace koi::train {

void ensure(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
}

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void linear_forward(ThreadPool* pool, float* y, const float* x, const float* w, const float* b, int64_t N, int64_t in,
                    int64_t out) {
  // W^T (in, out) is W read with swapped strides.
  kernels::sgemm(N, out, in, {x, in, 1}, {w, 1, in}, y, out, false, pool);
  if (b != nullptr) {
    for (int64_t n = 0; n < N; ++n) add_into(y + n * out, b, out);
  }
}

void linear_backward(ThreadPool* pool, float* dx, float* dw, float* db, const float* dy, const float* x, const float* w,
                     int64_t N, int64_t in, int64_t out) {
  if (dx != nullptr) kernels::sgemm(N, in, out, {dy, out, 1}, {w, in, 1}, dx, in, true, pool);
  if (dw != nullptr) kernels::sgemm(out, in, N, {dy, 1, out}, {x, in, 1}, dw, in, true, pool);  // dy^T (out, N)
  if (db != nullptr) {
    for (int64_t n = 0; n < N; ++n) add_into(db, dy + n * out, out);
  }
}

}  // namespace koi::train
