// ZeroPages: a zero-filled buffer of anonymous memory whose pages the kernel commits one by one
// on first write, so a large pool that is mostly unused (the KV cache at start-up) costs address
// space, not resident memory. Nothing writes the whole buffer: reading an untouched page reads
// zeros from the kernel's shared zero page.
// Move-only; the mapping is released on destruction. Construction throws std::bad_alloc when the
// kernel refuses the mapping, as std::vector would. Not thread-safe beyond plain memory.
#pragma once

#include <cstddef>

namespace koi {

class ZeroPages {
 public:
  ZeroPages() = default;
  explicit ZeroPages(size_t bytes);
  ~ZeroPages();
  ZeroPages(ZeroPages&& other) noexcept;
  ZeroPages& operator=(ZeroPages&& other) noexcept;
  ZeroPages(const ZeroPages&) = delete;
  ZeroPages& operator=(const ZeroPages&) = delete;

  void* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace koi
