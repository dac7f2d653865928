#include "base/thread_pool.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace koi {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}

// Spin this many pause instructions before sleeping (a few microseconds): long enough to
// catch the next op of a decode step, short enough not to starve other processes when the
// machine is oversubscribed (then every wait falls through to the futex).
constexpr int kSpinIterations = 4000;

}  // namespace

int ThreadPool::physical_cores() {
  // Count distinct (physical id, core id) pairs; fall back to hardware_concurrency.
  std::ifstream in("/proc/cpuinfo");
  std::set<std::pair<std::string, std::string>> cores;
  std::string line, phys = "0";
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, line.find_last_not_of(" \t", colon - 1) + 1);
    std::string val = colon + 2 <= line.size() ? line.substr(colon + 2) : "";
    if (key == "physical id") phys = val;
    if (key == "core id") cores.emplace(phys, val);
  }
  int n = static_cast<int>(cores.size());
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0 || n > hw) n = hw;
  return n > 0 ? n : 1;
}

ThreadPool::ThreadPool(int num_threads)
    : num_threads_(num_threads > 0 ? num_threads : physical_cores()) {
  for (int t = 1; t < num_threads_; ++t) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::run(const Fn& fn) {
  if (num_threads_ == 1) {
    fn(0, 1);
    return;
  }
  run_items(num_threads_, [&](int64_t i) { fn(static_cast<int>(i), num_threads_); });
}

void ThreadPool::range_ends(int64_t n, std::vector<int64_t>& ends) const {
  ends.clear();
  const int64_t equal = n < kRangesPerThread * num_threads_ ? n : kRangesPerThread * num_threads_;
  const int64_t taper = 2 * int64_t{num_threads_};
  int64_t begin = 0;
  for (int64_t i = 0; begin < n; ++i) {
    // Equal ranges (ends n (i + 1) / equal) while the rest is at least `taper` of them.
    const int64_t end_equal = i < equal ? n * (i + 1) / equal : n;
    const int64_t rest = n - begin;
    const int64_t tapered = begin + std::max<int64_t>(1, rest / taper);
    const int64_t end = rest * equal >= taper * n ? end_equal : std::min(end_equal, tapered);
    ends.push_back(end);
    begin = end;
  }
}

void ThreadPool::claim_items() {
  for (int64_t i = next_item_.fetch_add(1, std::memory_order_relaxed); i < num_items_;
       i = next_item_.fetch_add(1, std::memory_order_relaxed)) {
    (*item_fn_)(i);
  }
}

// The handshake that lets the caller return without waiting for workers that never arrived:
// a worker announces itself (active_ + 1) and only then checks open_; the caller closes the job
// (open_ = false) once every item is claimed and then waits for active_ to reach 0. Both sides
// are sequentially consistent, so a worker that saw the job open is counted in active_ when the
// caller looks, and one that arrives later sees it closed and touches nothing of it. (It may see
// the next job open instead and join that one, which is as good.)
void ThreadPool::run_items(int64_t n, const ItemFn& item) {
  item_fn_ = &item;
  num_items_ = n;
  next_item_.store(0, std::memory_order_relaxed);
  open_.store(true);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  claim_items();
  open_.store(false);
  int active = active_.load();
  for (int spin = 0; active != 0 && spin < kSpinIterations; ++spin) {
    cpu_relax();
    active = active_.load();
  }
  while (active != 0) {
    active_.wait(active);
    active = active_.load();
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen = generation_.load(std::memory_order_acquire);
    for (int spin = 0; gen == seen && spin < kSpinIterations; ++spin) {
      cpu_relax();
      gen = generation_.load(std::memory_order_acquire);
    }
    if (gen == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = gen;
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (open_.load()) claim_items();
    if (active_.fetch_sub(1) == 1) active_.notify_all();
  }
}

}  // namespace koi
