#include "model/packed_weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace koi::model {
namespace {

struct Mapping {
  uintptr_t begin, end;
};

// The shared, file-backed mappings of this process (lines of /proc/self/maps whose permissions
// end in 's' and whose inode is not 0). Empty if the file cannot be read.
std::vector<Mapping> shared_file_mappings() {
  std::vector<Mapping> out;
  FILE* f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return out;
  char line[4096];
  while (std::fgets(line, sizeof line, f) != nullptr) {
    unsigned long begin = 0, end = 0, inode = 0;
    char perms[8] = {};
    if (std::sscanf(line, "%lx-%lx %7s %*s %*s %lu", &begin, &end, perms, &inode) == 4 && perms[3] == 's' &&
        inode != 0) {
      out.push_back({begin, end});
    }
  }
  std::fclose(f);
  return out;
}

// Gives back the whole pages of [data, data + bytes) when they lie in one of `files`; returns the
// bytes given back.
int64_t release_pages(const std::vector<Mapping>& files, const void* data, int64_t bytes) {
  static const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(data);
  const uintptr_t end = begin + static_cast<uintptr_t>(bytes);
  for (const Mapping& m : files) {
    if (begin < m.begin || end > m.end) continue;
    const uintptr_t first = (begin + page - 1) / page * page, last = end / page * page;
    if (last <= first || madvise(reinterpret_cast<void*>(first), last - first, MADV_DONTNEED) != 0) return 0;
    return static_cast<int64_t>(last - first);
  }
  return 0;
}

}  // namespace

PackedWeights pack_weights(const ModelWeights& w) {
  PackedWeights out;
  const std::vector<Mapping> files = shared_file_mappings();
  const auto pack = [&](const TensorView& view) {
    kernels::PackedMatrix m(view);
    if (m.panels() != nullptr) {
      out.packed_bytes += m.packed_bytes();
      if (view.data != w.token_embd.data) out.released_bytes += release_pages(files, view.data, view.num_bytes());
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
