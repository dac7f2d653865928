// trace::Recorder: a profile in the Chrome trace event format (JSON object form, "X" complete
// events with microsecond timestamps), which Perfetto (ui.perfetto.dev) and chrome://tracing
// open. `koi train --profile FILE` records its steps through it.
//
// An event is a named span on a track (tid) with a start and a duration, both from the
// steady clock relative to the recorder's creation; spans on one track nest by time (a span
// that starts inside another ends inside it). Span is the RAII form: it records from its
// construction to its destruction, and does nothing with a null recorder, so code can always
// open spans and pay one branch when profiling is off. Thread-safe (a mutex per record).
// Users: `koi train --profile` (train/trainer.cc, train/llama_train.cc) and the engine's step
// loop (`koi serve --profile`, `koi bench offline --profile`: engine/step_trace.h, with the
// model's per-layer spans from model/llama.cc).
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::trace {

class Recorder {
 public:
  using Clock = std::chrono::steady_clock;

  // pid: the process id shown in the trace (e.g. the rank).
  explicit Recorder(int pid = 0);

  // The time point of `steady_ns`, nanoseconds since the steady clock's epoch: what
  // SystemClock::now_ns() returns (base/clock.h), so code timed with a koi::Clock records the
  // very instants it measured. Times from a FakeClock land before the recorder's origin.
  static Clock::time_point at_ns(int64_t steady_ns) {
    return Clock::time_point(std::chrono::duration_cast<Clock::duration>(std::chrono::nanoseconds(steady_ns)));
  }

  // Names a track ("step loop", "checkpoint writer").
  void name_track(int tid, const std::string& name);
  // A span [start, end) on track tid. `args` is a JSON object's members ("\"step\":3") or empty.
  void record(const std::string& name, const char* category, Clock::time_point start, Clock::time_point end, int tid = 0,
              const std::string& args = "");
  size_t size() const;
  // {"traceEvents":[...],"displayTimeUnit":"ms"}
  std::string to_json() const;
  // Writes to_json() to `path` atomically.
  Status write(const std::string& path) const;

 private:
  struct Event {
    std::string name;
    const char* category;
    int64_t ts_ns, dur_ns;
    int tid;
    std::string args;
  };
  const int pid_;
  const Clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<Event> events_;
  std::vector<std::pair<int, std::string>> tracks_;
};

// `s` as a JSON string literal, quotes included (for span args).
std::string quote(const std::string& s);

// Records [construction, destruction) on `recorder` (nothing when it is null).
class Span {
 public:
  Span(Recorder* recorder, std::string name, const char* category, int tid = 0)
      : recorder_(recorder), name_(recorder ? std::move(name) : std::string()), category_(category), tid_(tid),
        start_(recorder ? Recorder::Clock::now() : Recorder::Clock::time_point()) {}
  ~Span() {
    if (recorder_) recorder_->record(name_, category_, start_, Recorder::Clock::now(), tid_);
  }
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;

 private:
  Recorder* recorder_;
  std::string name_;
  const char* category_;
  int tid_;
  Recorder::Clock::time_point start_;
};

}  // namespace koi::trace
