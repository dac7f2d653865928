#include "kernels/packed_matrix.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

#include "base/check.h"
#include "kernels/isa.h"
#include "kernels/run_rows.h"
#include "kernels/simd.h"

namespace koi::kernels {
namespace {

// Panels of a matrix larger than a huge page are aligned to one and ask for transparent huge
// pages: a 4 KiB page fault per 4 KiB of first-touch writes made packing TinyLlama q8_0 take
// ~15 s of a loaded VM's time (most of it in the kernel); the tiles' streams also need fewer TLB
// entries. Only the whole huge pages inside the panels are advised, so no byte beyond them is
// made resident.
constexpr size_t kHugePage = size_t{2} << 20;
constexpr size_t kCacheLine = 64;  // the tiles' vector loads never straddle two lines

uint32_t* allocate_panels(size_t bytes) {
  const size_t align = bytes >= kHugePage ? kHugePage : kCacheLine;
  void* p = nullptr;
  if (posix_memalign(&p, align, bytes) != 0) return nullptr;
  if (align == kHugePage) madvise(p, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only
  return static_cast<uint32_t*>(p);
}

}  // namespace

PackedMatrix::PackedMatrix(const TensorView& w, ThreadPool* pool) : view_(w) {
  const bool quantized = w.type == DType::kQ8_0 || w.type == DType::kQ4_0;
  if (!quantized || w.data == nullptr || detected_isa() == Isa::kPortable) return;
  const int64_t in = w.ne[0], out = w.ne[1];
  KOI_CHECK(in % 32 == 0);
  packed_bytes_ = avx2::panel_layout_words(w.type, in, out) * 4;
  panels_.reset(allocate_panels(static_cast<size_t>(packed_bytes_)));
  KOI_CHECK(panels_ != nullptr);
  const MatmulArgs a{w.type, static_cast<const uint8_t*>(w.data), w.row_bytes(), nullptr, 0, nullptr, in, out, 1};
  constexpr int64_t kPanelRows = 16;
  run_rows(pool, (out + kPanelRows - 1) / kPanelRows, in * out, [&](int64_t p_begin, int64_t p_end) {
    avx2::pack_panels(a, p_begin * kPanelRows, std::min(p_end * kPanelRows, out), panels_.get());
  });
}

}  // namespace koi::kernels
