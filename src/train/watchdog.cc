#include "train/watchdog.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/check.h"

namespace koi::train {

Watchdog::Watchdog(int rank, double timeout_s, const Clock* clock)
    : rank_(rank), timeout_s_(timeout_s), clock_(clock) {
  KOI_CHECK(timeout_s > 0.0);
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Watchdog::begin(std::string_view what, int64_t step) {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = true;
  what_ = what;
  step_ = step;
  start_ns_ = clock_->now_ns();
}

void Watchdog::end() {
  std::lock_guard<std::mutex> lock(mu_);
  active_ = false;
}

std::optional<std::string> Watchdog::overdue(double extra_s) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (!active_) return std::nullopt;
  const double elapsed = static_cast<double>(clock_->now_ns() - start_ns_) * 1e-9;
  if (elapsed <= timeout_s_ + extra_s) return std::nullopt;
  return fmt::format("watchdog: rank {} step {}: collective '{}' did not complete within {:g} s", rank_, step_,
                     what_, timeout_s_);
}

void Watchdog::start_thread(double backstop_s, Expire on_expire, double poll_s) {
  KOI_CHECK(!thread_.joinable());
  if (!on_expire) {
    on_expire = [](const std::string& message) {
      std::fprintf(stderr, "%s\n", message.c_str());
      std::fflush(stderr);
      ::_exit(kWatchdogExitCode);
    };
  }
  thread_ = std::thread([this, backstop_s, on_expire = std::move(on_expire), poll_s] {
    thread_main(backstop_s, on_expire, poll_s);
  });
}

void Watchdog::thread_main(double backstop_s, Expire on_expire, double poll_s) {
  const auto poll = std::chrono::duration<double>(poll_s);
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_cv_.wait_for(lock, poll, [this] { return stop_; })) {
    lock.unlock();
    if (std::optional<std::string> message = overdue(backstop_s)) {
      on_expire(*message + "; a peer rank is not responding");
      return;  // fires once
    }
    lock.lock();
  }
}

}  // namespace koi::train
