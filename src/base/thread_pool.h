// ThreadPool: a persistent pool for data-parallel kernels with low dispatch overhead.
//
// A job is a fixed list of work items, numbered 0..n-1, that the calling thread and the workers
// claim one at a time from a shared counter as they arrive: each item runs exactly once, and only
// which thread runs it changes from call to call. So when another process takes a core, the
// threads that still run take the remaining items instead of every op waiting for the
// descheduled one; a worker that has not arrived by the time every item is claimed is not waited
// for. run(fn) has one item per thread index; parallel_for(n, fn) cuts [0, n) into ranges that
// depend only on n and num_threads(), so a caller whose result is the same for any split of
// [0, n) into ranges (every kernel here: the batch-invariance contract) stays bitwise
// reproducible.
//
// Workers spin briefly for the next job, then sleep on an atomic wait, so a decode step of
// hundreds of small operations does not pay a futex round trip per operation.
// One caller at a time: run() is not reentrant and must not be called from two threads at
// once (the engine thread owns its pool). Destruction joins the workers.
//
// Placement::kPinned gives each of the pool's threads a CPU of its own, so that another busy
// process shares a core with one of them, not two of them sharing one core while it has the
// other to itself (pp512 beside a CPU burner bound to one core: 1.39-1.49x slower than quiet
// pinned, 1.57-1.75x floating; beside a floating burner 1.45-1.58x against 1.68-1.90x; see
// bench/README.md). The pinning happens at the first job a thread calls: that caller stays on
// the CPU it is running on and the workers take other CPUs the caller may use, one per
// physical core before any core's second hardware thread. When the caller may use fewer CPUs
// than the pool has threads, nothing is pinned. A caller that is pinned keeps its CPU until
// a pinned pool it called is destroyed on that same thread (which restores its CPUs), and
// threads it starts meanwhile inherit that one CPU. A second pinned pool with the same caller
// (a draft model's beside the target's) picks the same CPUs; the first of the two destroyed
// gives the caller its CPUs back, so such pools are meant to go together (the engine's do).
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
  enum class Placement { kFloat, kPinned };

  // num_threads <= 0 means the number of physical cores.
  explicit ThreadPool(int num_threads = 0, Placement placement = Placement::kFloat);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(i, num_threads) once for each i in [0, num_threads), each on whichever thread claims it
  // (one thread may run several); returns when all have returned.
  void run(const Fn& fn);

  // Ranges per thread in parallel_for: small enough that a descheduled thread holds up an op by
  // at most one range, large enough that claiming one (an atomic add) costs nothing next to it.
  static constexpr int64_t kRangesPerThread = 8;

  // Splits [0, n) into contiguous ranges that depend only on n and num_threads() and calls
  // fn(begin, end) once per range, on whichever thread claims it. The ranges are at most
  // n / (kRangesPerThread * num_threads()) long (to one), and taper off once what is left is
  // less than 2 num_threads() of those: each then takes 1 / (2 num_threads()) of the rest, at
  // least 1. So the thread that claims the last range waits for the others at most about that
  // small range, not a whole 1 / (kRangesPerThread * num_threads()) of the op.
  template <typename F>
  void parallel_for(int64_t n, F&& fn) {
    if (n <= 0) return;
    if (num_threads_ == 1 || n == 1) {
      fn(int64_t{0}, n);
      return;
    }
    range_ends(n, range_ends_);
    const std::vector<int64_t>& ends = range_ends_;
    run_items(static_cast<int64_t>(ends.size()), [&](int64_t i) { fn(i == 0 ? 0 : ends[i - 1], ends[i]); });
  }
  // The ends of parallel_for's ranges over [0, n) on this pool, in order (the last is n).
  void range_ends(int64_t n, std::vector<int64_t>& ends) const;

  static int physical_cores();

 private:
  using ItemFn = std::function<void(int64_t item)>;
  // Runs item(i) for i in [0, n) on the caller and the workers that join; see the header comment.
  void run_items(int64_t n, const ItemFn& item);
  void claim_items();
  void worker_loop(int worker);
  // Placement::kPinned: pins the calling thread and picks the workers' CPUs (see above).
  void pin_caller();

  int num_threads_;
  std::vector<std::thread> workers_;
  std::vector<int64_t> range_ends_;  // parallel_for's, reused (one caller at a time)
  // The open job: written by the caller before it opens the job (open_), read by the workers
  // that saw it open.
  const ItemFn* item_fn_ = nullptr;
  int64_t num_items_ = 0;
  std::atomic<int64_t> next_item_{0};
  std::atomic<bool> open_{false};    // a job's items may still be claimed
  std::atomic<int> active_{0};       // workers inside claim_items() or about to check open_
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  // Placement. pinned_caller_: the thread the CPUs were last picked for; pinned_: whether they
  // were (enough CPUs). worker_cpus_[w]: worker w's CPU, applied by the worker itself when
  // pin_epoch_ moves past what it saw.
  Placement placement_;
  std::thread::id pinned_caller_;
  bool pinned_ = false;
  std::vector<std::atomic<int>> worker_cpus_;
  std::atomic<uint64_t> pin_epoch_{0};
};

}  // namespace koi
