#include "kernels/packed_matrix.h"

#include <algorithm>

#include "base/check.h"
#include "kernels/isa.h"
#include "kernels/run_rows.h"
#include "kernels/simd.h"

namespace koi::kernels {

PackedMatrix::PackedMatrix(const TensorView& w, ThreadPool* pool) : view_(w) {
  const bool quantized = w.type == DType::kQ8_0 || w.type == DType::kQ4_0;
  if (!quantized || w.data == nullptr || detected_isa() == Isa::kPortable) return;
  const int64_t in = w.ne[0], out = w.ne[1];
  KOI_CHECK(in % 32 == 0);
  constexpr int64_t kAlign = 64;  // a cache line: the tiles' vector loads never straddle two
  const int64_t words = avx2::panel_layout_words(w.type, in, out);
  packed_bytes_ = (words * 4 + kAlign - 1) / kAlign * kAlign;
  panels_.reset(static_cast<uint32_t*>(std::aligned_alloc(kAlign, static_cast<size_t>(packed_bytes_))));
  KOI_CHECK(panels_ != nullptr);
  const MatmulArgs a{w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), nullptr, 0, nullptr, in, out, 1};
  constexpr int64_t kPanelRows = 16;
  run_rows(pool, (out + kPanelRows - 1) / kPanelRows, in * out, [&](int64_t p_begin, int64_t p_end) {
    avx2::pack_panels(a, p_begin * kPanelRows, std::min(p_end * kPanelRows, out), panels_.get());
  });
}

}  // namespace koi::kernels
