#include "base/trace.h"

#include <fmt/format.h>

#include "base/file.h"

namespace koi::trace {
namespace {

// A JSON string's contents (quotes, backslashes and control characters escaped).
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\', out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(c));
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

std::string quote(const std::string& s) { return "\"" + escape(s) + "\""; }

Recorder::Recorder(int pid) : pid_(pid), origin_(Clock::now()) {}

void Recorder::name_track(int tid, const std::string& name) {
  std::lock_guard lock(mu_);
  tracks_.emplace_back(tid, name);
}

void Recorder::record(const std::string& name, const char* category, Clock::time_point start, Clock::time_point end,
                      int tid, const std::string& args) {
  const int64_t ts = std::chrono::duration_cast<std::chrono::nanoseconds>(start - origin_).count();
  const int64_t dur = std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count();
  std::lock_guard lock(mu_);
  events_.push_back({name, category, ts, dur, tid, args});
}

size_t Recorder::size() const {
  std::lock_guard lock(mu_);
  return events_.size();
}

std::string Recorder::to_json() const {
  std::lock_guard lock(mu_);
  std::string out = "{\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (const auto& [tid, name] : tracks_) {
    sep();
    out += fmt::format("{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{},\"tid\":{},\"args\":{{\"name\":\"{}\"}}}}",
                       pid_, tid, escape(name));
  }
  for (const Event& e : events_) {
    sep();
    // Microseconds with nanosecond precision: nested spans keep their order and containment.
    out += fmt::format("{{\"ph\":\"X\",\"name\":\"{}\",\"cat\":\"{}\",\"pid\":{},\"tid\":{},\"ts\":{:.3f},\"dur\":{:.3f}",
                       escape(e.name), e.category, pid_, e.tid, e.ts_ns / 1e3, e.dur_ns / 1e3);
    if (!e.args.empty()) out += ",\"args\":{" + e.args + "}";
    out += "}";
  }
  out += "\n],\"displayTimeUnit\":\"ms\"}\n";
  return out;
}

Status Recorder::write(const std::string& path) const { return write_file_atomic(path, to_json()); }

}  // namespace koi::trace
