// StopChecker: incremental stop-string matching over the text pieces of one request.
//
// push(piece) returns the text that is safe to send to the client now. It holds back the
// longest tail of the text that could still grow into a stop string, so no partial stop
// string ever reaches the client. When a stop string appears (possibly spread over many
// pieces), the text before it is released, the stop string and everything after it are
// dropped, and stopped() becomes true. finish() releases what is held when the request ends
// for another reason. With the pieces coming from a UTF-8-safe detokenizer, released text
// never splits a character. Not thread-safe: one per request.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace koi::engine {

class StopChecker {
 public:
  explicit StopChecker(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {}

  // Appends `piece`; returns the newly releasable text. Nothing is returned after a stop.
  std::string push(std::string_view piece);
  // Returns the held-back text (none after a stop).
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stop_strings_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace koi::engine
