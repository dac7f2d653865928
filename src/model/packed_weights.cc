#include "model/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <span>

namespace koi::model {
namespace {

// Gives back the whole pages of [data, data + bytes) when they lie in one of `files` (read-only
// shared file mappings, ModelWeights::file_mappings); returns the bytes given back.
int64_t release_pages(std::span<const std::span<const uint8_t>> files, const void* data, int64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (std::span<const uint8_t> file : files) {
    const auto file_begin = reinterpret_cast<uintptr_t>(file.data());
    if (begin < file_begin || end > file_begin + file.size()) continue;
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last <= first || madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
    return static_cast<int64_t>(last - first);
  }
  return 0;
}

}  // namespace

PackedWeights pack_weights(const ModelWeights& w) {
  PackedWeights out;
  const auto pack = [&](const TensorView& view) {
    kernels::PackedMatrix m(view);
    if (m.panels() != nullptr) {
      out.packed_bytes += m.packed_bytes();
      if (view.data != w.token_embd.data) {
        out.released_bytes += release_pages(w.file_mappings, view.data, view.num_bytes());
      }
    }
    return m;
  };
  for (const LayerWeights& L : w.layers) {
    out.layers.push_back({pack(L.wq), pack(L.wk), pack(L.wv), pack(L.wo), pack(L.w_gate), pack(L.w_up), pack(L.w_down)});
  }
  out.output = pack(w.output);
  return out;
}

}  // namespace koi::model
