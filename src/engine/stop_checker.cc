#include "engine/stop_checker.h"

#include <algorithm>

namespace koi::engine {

std::string StopChecker::push(std::string_view piece) {
  if (stopped_) return {};
  held_.append(piece);
  // The earliest stop string in the text wins; held_ contained none before this piece.
  size_t stop_at = std::string::npos;
  for (const std::string& stop : stop_strings_) stop_at = std::min(stop_at, held_.find(stop));
  if (stop_at != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, stop_at);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a proper prefix of some stop string.
  size_t hold = 0;
  for (const std::string& stop : stop_strings_) {
    for (size_t len = std::min(stop.size() - 1, held_.size()); len > hold; --len) {
      if (std::string_view(held_).substr(held_.size() - len) == std::string_view(stop).substr(0, len)) {
        hold = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - hold);
  held_.erase(0, held_.size() - hold);
  return out;
}

std::string StopChecker::finish() {
  std::string out;
  out.swap(held_);
  return out;
}

}  // namespace koi::engine
