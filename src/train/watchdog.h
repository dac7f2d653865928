// Watchdog: a deadline on the operation a rank is blocked in (a collective), and a thread
// that ends the process when the rank stays blocked past it.
//
// The training thread brackets each collective with begin(what, step) / end(). overdue()
// says, from the injected Clock, whether the operation in progress has run longer than the
// timeout, and returns the start of the message that reports it:
//   watchdog: rank R step S: collective 'WHAT' did not complete within T s
// The MPI communicator polls overdue() while it waits, so that the rank itself notices and
// can name the peer that is missing. start_thread() adds a backstop for a rank blocked where
// it cannot poll: once an operation is overdue by more than backstop_s beyond the timeout,
// the thread calls on_expire(message + "; a peer rank is not responding") (default: print to
// stderr and _exit(kWatchdogExitCode)).
// begin/end/overdue are thread-safe (a mutex); on_expire runs on the watchdog thread.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>

#include "base/clock.h"

namespace koi::train {

inline constexpr int kWatchdogExitCode = 75;

class Watchdog {
 public:
  using Expire = std::function<void(const std::string& message)>;

  // timeout_s > 0. The clock must outlive the watchdog.
  Watchdog(int rank, double timeout_s, const Clock* clock);
  ~Watchdog();  // stops the thread
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  double timeout_s() const { return timeout_s_; }

  void begin(std::string_view what, int64_t step);
  void end();
  // The report when an operation is in progress and has run longer than timeout + extra_s.
  std::optional<std::string> overdue(double extra_s = 0.0) const;

  // Starts the backstop thread (once); it checks every poll_s of real time.
  void start_thread(double backstop_s, Expire on_expire = {}, double poll_s = 0.1);

 private:
  void thread_main(double backstop_s, Expire on_expire, double poll_s);

  const int rank_;
  const double timeout_s_;
  const Clock* clock_;
  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;         // guarded by mu_
  bool active_ = false;       // guarded by mu_
  std::string what_;          // guarded by mu_
  int64_t step_ = 0;          // guarded by mu_
  int64_t start_ns_ = 0;      // guarded by mu_
  std::thread thread_;
};

}  // namespace koi::train
