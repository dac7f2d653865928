// Isa: the instruction-set levels the CPU kernels are compiled for, and the runtime switch
// that picks one. Each level's code lives in its own file compiled for that level only
// (ops_avx2.cc, ops_avx512.cc), so a binary built without -march=native runs on a plain
// x86-64 CPU and uses the fastest level the CPU reports.
//
// The active level is process-wide. It starts at detected_isa(); set_isa() exists for tests
// and benchmarks that compare levels, and must not be called while kernels run on another
// thread. Results are deterministic per level; two levels agree within each op's tolerance.
#pragma once

#include <string_view>

namespace koi::kernels {

enum class Isa {
  kPortable = 0,    // plain C++
  kAvx2 = 1,        // AVX2 + FMA + F16C
  kAvx512 = 2,      // + AVX-512 F/BW/DQ/VL/VNNI (integer dot products with vpdpbusd)
  kAvx512Bf16 = 3,  // + AVX512-BF16 (bf16 weights with vdpbf16ps on bf16-rounded activations)
};

// The highest level this CPU supports.
Isa detected_isa();
// The level the ops use now.
Isa active_isa();
// Selects the level, clamped to detected_isa(); returns the level that was active before.
Isa set_isa(Isa isa);
// "portable", "avx2", "avx512", "avx512bf16".
std::string_view isa_name(Isa isa);

}  // namespace koi::kernels
