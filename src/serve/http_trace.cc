#include "serve/http_trace.h"

#include <fmt/format.h>

namespace koi::serve {

HttpTrace::HttpTrace(trace::Recorder* recorder, const Clock& clock) : recorder_(recorder), clock_(clock) {}

int HttpTrace::take_track() {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < busy_.size(); ++i) {
    if (!busy_[i]) {
      busy_[i] = true;
      return kTrackBase + static_cast<int>(i);
    }
  }
  busy_.push_back(true);
  const int track = kTrackBase + static_cast<int>(busy_.size() - 1);
  recorder_->name_track(track, fmt::format("http {}", busy_.size() - 1));
  return track;
}

void HttpTrace::release_track(int track) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_[static_cast<size_t>(track - kTrackBase)] = false;
}

void HttpTrace::span(const char* name, int64_t begin, int64_t end, int track, const std::string& args) {
  recorder_->record(name, "http", trace::Recorder::at_ns(begin), trace::Recorder::at_ns(end), track, args);
}

HttpTrace::Request::Request(HttpTrace* trace) : trace_(trace && trace->recorder_ ? trace : nullptr) {
  if (!trace_) return;
  // The track first, then the clock: a request that ends on another thread releases its track
  // after reading its end, so a start read after taking the track never precedes the end of the
  // track's previous request (their spans could overlap on the track otherwise).
  track_ = trace_->take_track();
  start_ = trace_->clock_.now_ns();
}

void HttpTrace::Request::set_id(const std::string& id, bool stream) {
  id_ = id;
  stream_ = stream;
}

std::shared_ptr<std::atomic<int64_t>> HttpTrace::Request::submitted() {
  if (!trace_) return nullptr;
  submitted_ = trace_->clock_.now_ns();
  taken_ = std::make_shared<std::atomic<int64_t>>(-1);
  return taken_;
}

void HttpTrace::Request::first_output() {
  if (trace_ && first_output_ < 0) first_output_ = trace_->clock_.now_ns();
}

HttpTrace::Request::~Request() {
  if (!trace_) return;
  const int64_t end = trace_->clock_.now_ns();
  trace_->span("http request", start_, end, track_,
               fmt::format("\"id\":{},\"stream\":{},\"status\":{}", trace::quote(id_), stream_, status_));
  const int64_t parsed = submitted_ >= 0 ? submitted_ : end;
  trace_->span("parse", start_, parsed, track_);
  const int64_t taken = taken_ ? taken_->load() : -1;
  if (submitted_ >= 0 && taken >= submitted_) trace_->span("queued", submitted_, std::min(taken, end), track_);
  if (first_output_ >= 0) trace_->span("respond", std::max(first_output_, std::max(taken, parsed)), end, track_);
  trace_->release_track(track_);
}

}  // namespace koi::serve
