#include "cluster/control_plane/api_client.h"

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/detached.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/json.hpp>

#include "net/client.h"

namespace koi::cluster {
namespace json = boost::json;

namespace {

constexpr std::chrono::milliseconds kTimeout{30000};

Status from_reply(const std::string& server, int status, const std::string& body) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  std::string message = body;
  if (!ec && v.is_object()) {
    if (const json::value* m = v.as_object().if_contains("message"); m && m->is_string()) message = std::string(m->as_string());
  }
  if (status == 401) return Status::invalid_argument("unauthorized: " + message);
  if (status == 403) return Status::invalid_argument("forbidden: " + message);
  if (status == 404) return Status::not_found(message);
  if (status == 409) return Status::already_exists(message);
  if (status >= 400 && status < 500) return Status::invalid_argument(message);
  return Status::internal(server + " answered " + std::to_string(status) + ": " + message);
}

}  // namespace

Result<json::value> ApiClient::call(const std::string& method, const std::string& path, const std::string& body) {
  net::Headers headers{{"Authorization", "Bearer " + token_}};
  if (!body.empty()) headers.push_back({"Content-Type", "application/yaml"});
  auto r = net::Client::fetch(server_ + path, method, body, headers, kTimeout);
  if (!r.ok()) {
    return Status::unavailable("cannot reach the control plane at " + server_ + ": " + r.status().message() +
                               " (is `koi cluster serve` running? set --server or KOI_SERVER)");
  }
  if (r->status < 200 || r->status >= 300) return from_reply(server_, r->status, r->body);
  json::error_code ec;
  json::value v = json::parse(r->body, ec);
  if (ec) return Status::internal("the control plane sent invalid JSON: " + ec.message());
  return v;
}

Result<std::string> ApiClient::text(const std::string& path) {
  auto r = net::Client::fetch(server_ + path, "GET", "", {{"Authorization", "Bearer " + token_}}, kTimeout);
  if (!r.ok()) return Status::unavailable("cannot reach the control plane at " + server_ + ": " + r.status().message());
  if (r->status != 200) return from_reply(server_, r->status, r->body);
  return r->body;
}

Status ApiClient::stream(const std::string& path, const std::function<void(std::string_view)>& on_data) {
  KOI_ASSIGN_OR_RETURN(net::Url url, net::parse_url(server_ + path));
  boost::asio::io_context io;
  net::Client client;
  Status result;
  net::ClientRequest req;
  req.target = url.target;
  req.headers = {{"Authorization", "Bearer " + token_}};
  net::Timeouts timeouts;
  timeouts.idle = std::chrono::hours(24);
  const std::string host = net::resolve_host(url.host), port = url.port;
  boost::asio::co_spawn(
      io,
      [&]() -> boost::asio::awaitable<void> {
        auto ex = co_await client.open(host, port, std::move(req), timeouts);
        if (!ex.ok()) {
          result = Status::unavailable("cannot reach the control plane at " + server_ + ": " + ex.status().message());
          co_return;
        }
        if ((*ex)->status() != 200) {
          auto body = co_await (*ex)->read_all();
          result = from_reply(server_, (*ex)->status(), body.ok() ? *body : "");
          co_return;
        }
        for (;;) {
          auto chunk = co_await (*ex)->read_some();
          if (!chunk.ok()) {
            result = chunk.status();
            co_return;
          }
          if (chunk->empty() && (*ex)->done()) co_return;
          on_data(*chunk);
        }
      },
      boost::asio::detached);
  io.run();
  return result;
}

}  // namespace koi::cluster
