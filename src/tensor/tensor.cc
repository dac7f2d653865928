#include "tensor/tensor.h"

#include "base/check.h"

namespace koi {

std::string TensorView::shape_string() const {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

TensorView make_view(DType type, std::initializer_list<int64_t> ne, const void* data) {
  KOI_CHECK(ne.size() >= 1 && ne.size() <= kMaxDims);
  TensorView v;
  v.type = type;
  v.n_dims = static_cast<int>(ne.size());
  int i = 0;
  for (int64_t d : ne) v.ne[i++] = d;
  v.data = data;
  return v;
}

}  // namespace koi
