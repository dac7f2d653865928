#include "cluster/control_plane/console.h"

namespace koi::cluster {
namespace {

constexpr std::string_view kPrefix = "/console/";

std::string content_type_of(std::string_view name) {
  if (name.ends_with(".html")) return "text/html; charset=utf-8";
  if (name.ends_with(".js")) return "text/javascript; charset=utf-8";
  if (name.ends_with(".css")) return "text/css; charset=utf-8";
  return "application/octet-stream";
}

}  // namespace

Reply console_reply(std::string_view path) {
  std::string_view name = "index.html";
  if (path.starts_with(kPrefix) && path.size() > kPrefix.size()) name = path.substr(kPrefix.size());
  for (const EmbeddedFile& f : console_files()) {
    if (f.name == name) return {200, std::string(f.data), content_type_of(name)};
  }
  return {404, status_json(404, "NotFound", "no console file " + std::string(name) + "; the console is at /console/")};
}

}  // namespace koi::cluster
