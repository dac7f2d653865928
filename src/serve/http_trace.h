// HttpTrace: the HTTP handling spans of `koi serve --profile`, on the same trace::Recorder as
// the engine's steps (engine/step_trace.h), timed with the engine's clock (SystemClock), so a
// request's HTTP spans line up with its engine spans in one timeline.
//
// Tracks kTrackBase + N, "http N": per generation request (POST /v1/completions,
// /v1/chat/completions) an "http request" span (args: id, stream, status) from the handler's
// start to the response's last byte, holding in order
//   "parse"   the JSON body, the chat template, tokenizing: until EngineService::submit
//   "queued"  until the engine thread takes the request (EngineService's admit)
//   "respond" from the first engine output to the last byte written: the SSE events as they
//             stream, or the whole JSON body
// A track carries one request at a time (the lowest free one is taken), so its spans nest.
// A request refused before it reaches the engine (a bad body, a full queue) has only "parse".
//
// HttpTrace is thread-safe (HTTP threads open requests concurrently); a Request belongs to
// the coroutine handling one request. A null recorder makes everything a no-op.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/trace.h"

namespace koi::serve {

class HttpTrace {
 public:
  static constexpr int kTrackBase = 10000;

  // `recorder` (null: off) must outlive this object.
  explicit HttpTrace(trace::Recorder* recorder, const Clock& clock = SystemClock::instance());

  // One generation request's spans, recorded when it is destroyed.
  class Request {
   public:
    explicit Request(HttpTrace* trace);  // the handler's start
    ~Request();
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;

    void set_id(const std::string& id, bool stream);
    void set_status(int status) { status_ = status; }
    // Just before EngineService::submit; returns what submit() sets when the engine takes it.
    std::shared_ptr<std::atomic<int64_t>> submitted();
    void first_output();  // the first engine output arrived at the handler

   private:
    HttpTrace* trace_;  // null: off
    int track_ = -1;
    std::string id_;
    bool stream_ = false;
    int status_ = 0;
    int64_t start_ = 0, submitted_ = -1, first_output_ = -1;
    std::shared_ptr<std::atomic<int64_t>> taken_;
  };

 private:
  int take_track();
  void release_track(int track);
  void span(const char* name, int64_t begin, int64_t end, int track, const std::string& args = "");

  trace::Recorder* recorder_;
  const Clock& clock_;
  std::mutex mu_;
  std::vector<bool> busy_;  // guarded by mu_: tracks kTrackBase + i in use
};

}  // namespace koi::serve
