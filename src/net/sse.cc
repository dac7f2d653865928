#include "net/sse.h"

namespace koi::net {

std::string sse_data(std::string_view payload) {
  std::string out;
  out.reserve(payload.size() + 8);
  out += "data: ";
  out += payload;
  out += "\n\n";
  return out;
}

std::vector<SseEvent> SseSplitter::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<SseEvent> out;
  size_t start = 0;
  for (size_t end; (end = pending_.find("\n\n", start)) != std::string::npos; start = end + 2) {
    SseEvent ev;
    ev.raw = pending_.substr(start, end + 2 - start);
    std::string_view text(ev.raw);
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      std::string_view line = text.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        ev.data += line;
      }
      pos = nl + 1;
    }
    out.push_back(std::move(ev));
  }
  pending_.erase(0, start);
  return out;
}

}  // namespace koi::net
