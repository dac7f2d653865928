// Test helpers for the kernel levels: run a block of a test at one level and list the levels
// this CPU can run. Test code only; the library does not include it.
#pragma once

#include <vector>

#include "kernels/isa.h"

namespace koi::kernels {

// Selects a level for its lifetime and restores the previous one.
class ScopedIsa {
 public:
  explicit ScopedIsa(Isa isa) : previous_(set_isa(isa)) {}
  ~ScopedIsa() { set_isa(previous_); }
  ScopedIsa(const ScopedIsa&) = delete;
  ScopedIsa& operator=(const ScopedIsa&) = delete;

 private:
  Isa previous_;
};

// Every level up to the detected one, portable first.
inline std::vector<Isa> levels() {
  std::vector<Isa> out;
  for (int i = 0; i <= static_cast<int>(detected_isa()); ++i) out.push_back(static_cast<Isa>(i));
  return out;
}

}  // namespace koi::kernels
