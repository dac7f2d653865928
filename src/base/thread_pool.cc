#include "base/thread_pool.h"

#include <sched.h>
#include <sys/sysinfo.h>

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

// The physical core a CPU belongs to ("package:core", from sysfs), or "" when unknown.
std::string core_of(int cpu) {
  const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
  std::ifstream package(dir + "physical_package_id"), core(dir + "core_id");
  std::string p, c;
  if (!(package >> p) || !(core >> c)) return "";
  return p + ":" + c;
}

std::vector<int> cpus_in(const cpu_set_t& set) {
  std::vector<int> cpus;
  for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (CPU_ISSET(cpu, &set)) cpus.push_back(cpu);
  }
  return cpus;
}

// The CPUs this thread could use before a pool pinned it (empty: not pinned), so that a second
// pool with the same caller (a draft model's beside the target's) picks the same CPUs.
thread_local std::vector<int> t_cpus_before_pin;

void set_cpus(const std::vector<int>& cpus) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  sched_setaffinity(0, sizeof set, &set);  // a refusal leaves the thread where it may run: no harm
}

// `n` CPUs of `allowed` for the pool's threads: `first` (the caller's), then one CPU of each core
// not yet taken, then the cores' other hardware threads. A CPU of unknown core counts as a core.
std::vector<int> pin_order(const std::vector<int>& allowed, int first, int n) {
  const bool may_stay = std::find(allowed.begin(), allowed.end(), first) != allowed.end();
  std::vector<int> order = {may_stay ? first : allowed.front()};
  std::set<std::string> cores = {core_of(order[0])};
  std::vector<int> siblings;
  for (int cpu : allowed) {
    if (cpu == order[0]) continue;
    const std::string core = core_of(cpu);
    if (core.empty() || cores.insert(core).second) {
      order.push_back(cpu);
    } else {
      siblings.push_back(cpu);
    }
  }
  order.insert(order.end(), siblings.begin(), siblings.end());
  order.resize(std::min(order.size(), static_cast<size_t>(n)));
  return order;
}

}  // namespace

int ThreadPool::physical_cores() {
  std::set<std::string> cores;
  const int configured = get_nprocs_conf();
  for (int cpu = 0; cpu < configured; ++cpu) {
    std::string core = core_of(cpu);
    if (!core.empty()) cores.insert(std::move(core));
  }
  int n = static_cast<int>(cores.size());
  int hw = static_cast<int>(std::thread::hardware_concurrency());
  if (n <= 0 || n > hw) n = hw;
  return n > 0 ? n : 1;
}

ThreadPool::ThreadPool(int num_threads, Placement placement)
    : num_threads_(num_threads > 0 ? num_threads : physical_cores()),
      placement_(placement),
      worker_cpus_(static_cast<size_t>(num_threads_ - 1)) {
  for (int w = 0; w + 1 < num_threads_; ++w) workers_.emplace_back([this, w] { worker_loop(w); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
  if (pinned_ && pinned_caller_ == std::this_thread::get_id() && !t_cpus_before_pin.empty()) {
    set_cpus(t_cpus_before_pin);
    t_cpus_before_pin.clear();
  }
}

void ThreadPool::pin_caller() {
  pinned_caller_ = std::this_thread::get_id();
  pinned_ = false;
  std::vector<int> allowed = t_cpus_before_pin;
  if (allowed.empty()) {
    cpu_set_t mask;
    if (sched_getaffinity(0, sizeof mask, &mask) != 0) return;
    allowed = cpus_in(mask);
  }
  if (static_cast<int>(allowed.size()) < num_threads_) return;
  const std::vector<int> order = pin_order(allowed, sched_getcpu(), num_threads_);
  t_cpus_before_pin = allowed;
  pinned_ = true;
  set_cpus({order[0]});
  for (size_t w = 0; w < worker_cpus_.size(); ++w) worker_cpus_[w] = order[w + 1];
  pin_epoch_.fetch_add(1, std::memory_order_release);
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
  if (placement_ == Placement::kPinned && pinned_caller_ != std::this_thread::get_id()) pin_caller();
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

void ThreadPool::worker_loop(int worker) {
  uint64_t seen = 0, pinned_epoch = 0;
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
    if (const uint64_t epoch = pin_epoch_.load(std::memory_order_acquire); epoch != pinned_epoch) {
      pinned_epoch = epoch;
      set_cpus({worker_cpus_[static_cast<size_t>(worker)].load(std::memory_order_relaxed)});
    }
    active_.fetch_add(1);
    if (open_.load()) claim_items();
    if (active_.fetch_sub(1) == 1) active_.notify_all();
  }
}

}  // namespace koi
