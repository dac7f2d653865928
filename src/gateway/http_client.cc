#include "gateway/http_client.h"

#include <arpa/inet.h>
#include <netdb.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <boost/url/parse.hpp>

namespace koi::gateway {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

std::string resolve_host(const std::string& host) {
  beast::error_code ec;
  asio::ip::make_address(host, ec);
  if (!ec) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return host;
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

asio::awaitable<Result<HttpResponse>> async_http_call(std::string host, std::string port, std::string method,
                                                     std::string target, std::string body, Headers headers,
                                                     std::chrono::milliseconds timeout) {
  constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
  auto ex = co_await asio::this_coro::executor;
  const std::string where = "http://" + host + ":" + port + target;
  auto fail = [&](const beast::error_code& ec) -> Status {
    if (ec == beast::error::timeout) return Status::deadline_exceeded(where + ": no answer within " + std::to_string(timeout.count()) + " ms");
    return Status::unavailable(where + ": " + ec.message());
  };
  const std::string ip = resolve_host(host);
  beast::error_code aec;
  const tcp::endpoint ep(asio::ip::make_address(ip, aec), static_cast<uint16_t>(std::atoi(port.c_str())));
  if (aec) co_return Status::unavailable(where + ": cannot resolve host '" + host + "'");
  beast::tcp_stream stream(ex);
  stream.expires_after(timeout);
  auto [cec] = co_await stream.async_connect(ep, kNoThrow);
  if (cec) co_return fail(cec);
  http::request<http::string_body> req{http::string_to_verb(method), target, 11};
  req.set(http::field::host, host + ":" + port);
  for (const auto& [k, v] : headers) req.set(k, v);
  if (!body.empty()) req.set(http::field::content_type, "application/json");
  req.body() = std::move(body);
  req.prepare_payload();
  auto [wec, wn] = co_await http::async_write(stream, req, kNoThrow);
  if (wec) co_return fail(wec);
  beast::flat_buffer buf;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  auto [ec, n] = co_await http::async_read(stream, buf, parser, kNoThrow);
  if (ec) co_return fail(ec);
  beast::error_code ignored;
  stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  co_return HttpResponse{static_cast<int>(parser.get().result_int()), std::move(parser.get().body())};
}

Result<HttpResponse> http_call(const std::string& url, const std::string& method, const std::string& body,
                               const Headers& headers, std::chrono::milliseconds timeout) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || u->scheme() != "http" || u->host().empty()) return Status::invalid_argument("URL '" + url + "' must read http://HOST:PORT/...");
  std::string target(u->encoded_target());
  if (target.empty()) target = "/";
  asio::io_context io;
  std::optional<Result<HttpResponse>> out;
  const std::string port = u->has_port() ? std::string(u->port()) : "80";
  auto call = [&]() -> asio::awaitable<void> {
    out.emplace(co_await async_http_call(u->host(), port, method, target, body, headers, timeout));
  };
  asio::co_spawn(io, call(), asio::detached);
  io.run();
  if (!out) return Status::internal(url + ": the HTTP client stopped without an answer");
  return std::move(*out);
}

}  // namespace koi::gateway
