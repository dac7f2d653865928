// ApiClient: the CLI's side of the control plane's API (koi job / queue / node), on
// net::Client::fetch. Errors come back as Status values carrying the server's message
// ("spec.replicas: must be >= 1"), or saying the server could not be reached and how to
// point at it. Blocking; one call at a time per client.
#pragma once

#include <boost/json/value.hpp>
#include <functional>
#include <string>

#include "base/status.h"

namespace koi::cluster {

class ApiClient {
 public:
  ApiClient(std::string server, std::string token) : server_(std::move(server)), token_(std::move(token)) {}

  // JSON responses; `body` for POST; a non-2xx status is an error with the server's message.
  Result<boost::json::value> call(const std::string& method, const std::string& path, const std::string& body = "");
  // Plain text (logs).
  Result<std::string> text(const std::string& path);
  // Streams a chunked response to `on_data` as it arrives (logs -f).
  Status stream(const std::string& path, const std::function<void(std::string_view)>& on_data);

 private:
  std::string server_, token_;
};

}  // namespace koi::cluster
