// Server-sent events (text/event-stream), both directions.
//   sse_data(): one event carrying `payload` as its data ("data: ...\n\n").
//   SseSplitter: cuts a byte stream into complete events (each ends with a blank line),
//     holding only the unfinished tail, so a relay can forward each event the moment its
//     last byte arrives and never buffers a whole response.
// Plain functions and a plain (single-threaded) class.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace koi::net {

std::string sse_data(std::string_view payload);

struct SseEvent {
  std::string raw;   // the event's bytes including the blank line that ends it
  std::string data;  // the payload of its data lines, joined ("" when it has none)
};

class SseSplitter {
 public:
  // Appends bytes and returns the events completed by them.
  std::vector<SseEvent> feed(std::string_view bytes);
  // Bytes of an event that has not ended yet.
  const std::string& pending() const { return pending_; }

 private:
  std::string pending_;
};

}  // namespace koi::net
