// MetricsServer: a registry (base/metrics.h) served at GET /metrics in the Prometheus text
// format, plus GET /health, on a net::Server of its own; for programs that have no HTTP API
// to hang /metrics on (`koi train --metrics-port N`). Other paths get 404, other methods on
// these paths 405. The registry must outlive the server; stop() (or the destructor) joins.
#pragma once

#include <memory>
#include <string>

#include "base/metrics.h"
#include "base/status.h"
#include "net/server.h"

namespace koi::net {

class MetricsServer {
 public:
  // Listens on host:port (0: any free port) and starts serving.
  static Result<std::unique_ptr<MetricsServer>> start(const metrics::Registry& registry, const std::string& host,
                                                      int port);
  int port() const { return port_; }
  void stop() { server_->stop(); }

 private:
  MetricsServer() = default;
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

}  // namespace koi::net
