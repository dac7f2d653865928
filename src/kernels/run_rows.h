// Internal to src/kernels: how an op decides whether to use the pool. Shared by ops.cc and
// gemm.cc; nothing here allocates or fails.
#pragma once

#include <cstdint>
#include <functional>

#include "base/thread_pool.h"

namespace koi::kernels {

// Below this many multiply-adds an op runs on the calling thread: waking the pool costs more
// than the work (a few microseconds, and far more when the machine is oversubscribed and the
// workers must wait for a core).
inline constexpr int64_t kMinParallelWork = int64_t{1} << 17;

// fn over [0, n) split into one contiguous range per pool thread when `work` (multiply-adds)
// is worth waking the pool, else fn(0, n) on the calling thread.
inline void run_rows(ThreadPool* pool, int64_t n, int64_t work, const std::function<void(int64_t, int64_t)>& fn) {
  if (pool != nullptr && work >= kMinParallelWork) {
    pool->parallel_for(n, fn);
  } else {
    fn(0, n);
  }
}

}  // namespace koi::kernels
