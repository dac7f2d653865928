// Clock: the time seam. Production code takes a Clock& and tests inject a FakeClock,
// so nothing in a test depends on how fast the machine is. now_ns() is monotonic.
// SystemClock is thread-safe; FakeClock is thread-safe for reads and advance().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace koi {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual int64_t now_ns() const = 0;          // monotonic
  double now_seconds() const { return static_cast<double>(now_ns()) * 1e-9; }
};

class SystemClock final : public Clock {
 public:
  int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  static SystemClock& instance() {
    static SystemClock clock;
    return clock;
  }
};

class FakeClock final : public Clock {
 public:
  explicit FakeClock(int64_t start_ns = 0) : now_(start_ns) {}
  int64_t now_ns() const override { return now_.load(); }
  void advance_ns(int64_t delta) { now_.fetch_add(delta); }
  void set_ns(int64_t t) { now_.store(t); }

 private:
  std::atomic<int64_t> now_;
};

}  // namespace koi
