// The web console: static files (src/cluster/control_plane/console/: index.html, console.js,
// console.css) embedded in the binary at build time (cmake/embed_files.cmake) and served by the
// control plane at / and /console/ without a token. Everything the page shows it reads through
// the REST API with the token the operator logs in with (fetch with "Authorization: Bearer"),
// so it sees exactly what that token may see: a tenant its own namespace, an admin every one.
// No CDN, no build step: the charts are SVG the page draws.
#pragma once

#include <span>
#include <string_view>

#include "cluster/control_plane/api.h"

namespace koi::cluster {

struct EmbeddedFile {
  std::string_view name;  // relative to the console folder: "index.html"
  std::string_view data;
};

// The embedded files (generated: console_files.cc in the build folder).
std::span<const EmbeddedFile> console_files();

// GET PATH for "/", "/console", "/console/" (index.html) and "/console/NAME"; 404 otherwise.
Reply console_reply(std::string_view path);

}  // namespace koi::cluster
