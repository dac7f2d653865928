// Scalar reference kernels: the oracle every fast kernel is tested against.
#include <vector>

#include "kernels/ops.h"

namespace koi::kernels::ref {

void matmul(const TensorView& w, const float* x, float* y, int64_t n_tokens) {
  const int64_t in = w.ne[0], out = w.ne[1];
  std::vector<float> row(static_cast<size_t>(in));
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(w.type, w.row(o), row.data(), in);
    for (int64_t t = 0; t < n_tokens; ++t) {
      const float* xt = x + t * in;
      double acc = 0.0;
      for (int64_t i = 0; i < in; ++i) acc += static_cast<double>(row[i]) * xt[i];
      y[t * out + o] = static_cast<float>(acc);
    }
  }
}

float dot(const float* a, const float* b, int64_t n) {
  double acc = 0.0;
  for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(a[i]) * b[i];
  return static_cast<float>(acc);
}

}  // namespace koi::kernels::ref
