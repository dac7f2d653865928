#include "kernels/isa.h"

#include <algorithm>
#include <atomic>

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace koi::kernels {
namespace {

// CPU features from cpuid directly (clang 14's __builtin_cpu_supports lacks "f16c"), and
// the OS's XSAVE state: AVX needs XMM/YMM saved, AVX-512 also the opmask and ZMM registers.
Isa detect() {
#if defined(__x86_64__)
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return Isa::kPortable;
  const bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return Isa::kPortable;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 0x6u) != 0x6u) return Isa::kPortable;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return Isa::kPortable;
  const bool avx2 = b & (1u << 5);
  if (!avx2) return Isa::kPortable;
  const bool avx512 = (b & (1u << 16)) && (b & (1u << 17)) && (b & (1u << 30)) && (b & (1u << 31)) &&
                      (c & (1u << 11)) && (xcr0_lo & 0xE6u) == 0xE6u;  // F, DQ, BW, VL, VNNI
  if (!avx512) return Isa::kAvx2;
  const bool bf16 = __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5));
  return bf16 ? Isa::kAvx512Bf16 : Isa::kAvx512;
#else
  return Isa::kPortable;
#endif
}

std::atomic<Isa>& active() {
  static std::atomic<Isa> isa{detected_isa()};
  return isa;
}

}  // namespace

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() { return active().load(std::memory_order_relaxed); }

Isa set_isa(Isa isa) {
  return active().exchange(std::min(isa, detected_isa()), std::memory_order_relaxed);
}

std::string_view isa_name(Isa isa) {
  switch (isa) {
    case Isa::kPortable: return "portable";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAvx512Bf16: return "avx512bf16";
  }
  return "unknown";
}

}  // namespace koi::kernels
