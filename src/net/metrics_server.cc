#include "net/metrics_server.h"

#include <boost/asio/awaitable.hpp>

namespace koi::net {
namespace {

struct Reply {
  int status;
  std::string body;
  std::string content_type;
};

Reply route(const metrics::Registry& registry, const Request& req) {
  const std::string_view path = request_path(req);
  if (path != "/metrics" && path != "/health") return {404, "no route; this server has /metrics and /health\n", "text/plain"};
  if (req.method() != boost::beast::http::verb::get) return {405, "use GET\n", "text/plain"};
  if (path == "/health") return {200, "ok\n", "text/plain"};
  return {200, registry.render(), "text/plain; version=0.0.4; charset=utf-8"};
}

}  // namespace

Result<std::unique_ptr<MetricsServer>> MetricsServer::start(const metrics::Registry& registry, const std::string& host,
                                                            int port) {
  ServerOptions options;
  options.host = host;
  options.port = port;
  std::unique_ptr<MetricsServer> m(new MetricsServer());
  m->server_ = std::make_unique<Server>(options, [&registry](Request& req, Responder& res) -> boost::asio::awaitable<void> {
    Reply r = route(registry, req);
    co_await res.send(r.status, std::move(r.body), r.content_type);
  });
  Result<int> bound = m->server_->listen();
  if (!bound.ok()) return bound.status().with_prefix("metrics server on " + host + ":" + std::to_string(port));
  m->port_ = *bound;
  m->server_->start();
  return m;
}

}  // namespace koi::net
