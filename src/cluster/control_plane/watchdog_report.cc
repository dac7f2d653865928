#include "cluster/control_plane/watchdog_report.h"

#include <vector>

namespace koi::cluster {

std::optional<std::string> find_watchdog_report(std::string_view log) {
  constexpr std::string_view kStart = "watchdog: rank ";
  std::vector<std::string_view> reports;
  for (size_t at = log.find(kStart); at != std::string_view::npos; at = log.find(kStart, at + 1)) {
    size_t end = log.find('\n', at);
    if (end == std::string_view::npos) end = log.size();
    std::string_view line = log.substr(at, end - at);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find(": collective '") != std::string_view::npos && line.find("did not complete within") != std::string_view::npos) {
      reports.push_back(line);
    }
  }
  for (std::string_view r : reports) {
    if (r.find("not responding: rank ") != std::string_view::npos) return std::string(r);
  }
  if (!reports.empty()) return std::string(reports.front());
  return std::nullopt;
}

}  // namespace koi::cluster
