#include "kernels/isa.h"

#include <algorithm>
#include <atomic>

namespace koi::kernels {
namespace {

Isa detect() {
#if defined(__x86_64__) && defined(__GNUC__)
  __builtin_cpu_init();
  if (!(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("f16c"))) {
    return Isa::kPortable;
  }
  if (!(__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
        __builtin_cpu_supports("avx512vnni"))) {
    return Isa::kAvx2;
  }
  return __builtin_cpu_supports("avx512bf16") ? Isa::kAvx512Bf16 : Isa::kAvx512;
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
