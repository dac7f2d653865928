// A small HTTP/1.1 client on Boost.Beast: one request per connection, with a deadline that
// covers resolve, connect, write and read. async_http_call() runs on the caller's executor
// (the gateway's health checks); http_call() is the blocking form for the CLI (rollout) and
// tests. Failures are Status values: kUnavailable (refused, reset), kDeadlineExceeded.
// Host names are resolved with a blocking getaddrinfo (IPv4) by resolve_host(): the gateway
// resolves a replica's host once, when the replica is added, never on the request path.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace koi::gateway {

struct HttpResponse {
  int status = 0;
  std::string body;
};

using Headers = std::vector<std::pair<std::string, std::string>>;

// The IPv4 address of `host` ("127.0.0.1" for "localhost"); `host` itself if it is an address
// already or cannot be resolved (the connect then fails and says so).
std::string resolve_host(const std::string& host);

boost::asio::awaitable<Result<HttpResponse>> async_http_call(std::string host, std::string port, std::string method,
                                                            std::string target, std::string body, Headers headers,
                                                            std::chrono::milliseconds timeout);
// `url` is http://host:port/path.
Result<HttpResponse> http_call(const std::string& url, const std::string& method, const std::string& body,
                               const Headers& headers, std::chrono::milliseconds timeout);

}  // namespace koi::gateway
