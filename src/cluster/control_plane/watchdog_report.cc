#include "cluster/control_plane/watchdog_report.h"

namespace koi::cluster {

std::optional<std::string> find_watchdog_report(std::string_view log) {
  constexpr std::string_view kStart = "watchdog: rank ";
  constexpr std::string_view kCollective = ": collective '";
  for (size_t at = log.rfind(kStart); at != std::string_view::npos; at = at ? log.rfind(kStart, at - 1) : at) {
    size_t end = log.find('\n', at);
    if (end == std::string_view::npos) end = log.size();
    std::string_view line = log.substr(at, end - at);
    while (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.find(kCollective) != std::string_view::npos && line.find("did not complete within") != std::string_view::npos) {
      return std::string(line);
    }
    if (at == 0) break;
  }
  return std::nullopt;
}

}  // namespace koi::cluster
