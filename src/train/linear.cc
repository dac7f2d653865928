#include "train/linear.h"

#include <algorithm>

#include "kernels/ops.h"
#include "tensor/tensor.h"

namespace koi::train {
namespace {

// a (rows, cols) -> at (cols, rows)
void transpose(const float* a, float* at, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) at[c * rows + r] = a[r * cols + c];
  }
}

}  // namespace

void ensure(std::vector<float>& buf, int64_t n) {
  if (static_cast<int64_t>(buf.size()) < n) buf.resize(static_cast<size_t>(n));
}

void add_into(float* dst, const float* src, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] += src[i];
}

void linear_forward(ThreadPool* pool, float* y, const float* x, const float* w, const float* b, int64_t N, int64_t in,
                    int64_t out) {
  kernels::matmul(make_view(DType::kF32, {in, out}, w), x, y, N, pool);
  if (b != nullptr) {
    for (int64_t n = 0; n < N; ++n) kernels::axpy(1.0f, b, y + n * out, out);
  }
}

void linear_backward(ThreadPool* pool, std::vector<float>* scratch, float* dx, float* dw, float* db, const float* dy,
                     const float* x, const float* w, int64_t N, int64_t in, int64_t out) {
  std::vector<float>& a = scratch[0];
  std::vector<float>& b = scratch[1];
  std::vector<float>& c = scratch[2];
  ensure(a, std::max(in * out, N * in));
  ensure(b, std::max(N * in, N * out));
  ensure(c, out * in);
  if (dx != nullptr) {
    transpose(w, a.data(), out, in);  // W^T (in, out)
    kernels::matmul(make_view(DType::kF32, {out, in}, a.data()), dy, b.data(), N, pool);
    add_into(dx, b.data(), N * in);
  }
  if (dw != nullptr) {
    transpose(x, a.data(), N, in);    // x^T (in, N)
    transpose(dy, b.data(), N, out);  // dy^T (out, N)
    kernels::matmul(make_view(DType::kF32, {N, in}, a.data()), b.data(), c.data(), out, pool);
    add_into(dw, c.data(), out * in);
  }
  if (db != nullptr) {
    for (int64_t n = 0; n < N; ++n) add_into(db, dy + n * out, out);
  }
}

}  // namespace koi::train
