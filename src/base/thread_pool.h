// ThreadPool: a persistent pool for data-parallel kernels with low dispatch overhead.
//
// run(fn) calls fn(thread_idx, num_threads) once on each of num_threads threads (the
// calling thread is thread 0) and returns when all have finished. Workers spin briefly
// for the next job, then sleep on an atomic wait, so a decode step of hundreds of small
// operations does not pay a futex round trip per operation.
// One caller at a time: run() is not reentrant and must not be called from two threads at
// once (the engine thread owns its pool). Destruction joins the workers.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace koi {

class ThreadPool {
 public:
  using Fn = std::function<void(int thread_idx, int num_threads)>;

  // num_threads <= 0 means the number of physical cores.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  void run(const Fn& fn);

  // Splits [0, n) into contiguous ranges, one per thread: fn(begin, end).
  template <typename F>
  void parallel_for(int64_t n, F&& fn) {
    if (n <= 0) return;
    if (num_threads_ == 1 || n == 1) {
      fn(int64_t{0}, n);
      return;
    }
    run([&](int t, int nt) {
      int64_t begin = n * t / nt, end = n * (t + 1) / nt;
      if (begin < end) fn(begin, end);
    });
  }

  static int physical_cores();

 private:
  void worker_loop(int thread_idx);

  int num_threads_;
  std::vector<std::thread> workers_;
  const Fn* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace koi
