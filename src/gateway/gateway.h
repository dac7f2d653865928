// Gateway: the running `koi gateway` — an OpenAI-compatible front door on one port and the
// admin API on another, each a net::Server (`threads` single-threaded io_contexts for the API,
// one for admin), with replica health checks on a timer.
//
// One request's way through the gateway (authenticate, admit, pick a replica with retries
// before the first byte, relay each SSE event as it completes, meter into the Ledger before
// the client sees the end; a cut stream ends with an error event; a client that leaves is
// recorded as 499 and its replica connection closed) is gateway/proxy.h.
// Timeouts: connect, first byte, and idle between reads on both sides.
//
// Admin API (Authorization: Bearer <admin key>): see gateway/admin_api.h.
// gRPC API (grpc_listen: HOST:PORT, proto/koi/v1/inference.proto): see gateway/grpc_api.h.
//
// start() returns once both ports listen; stop() (also the destructor) closes the listeners,
// finishes the worker threads and drains the ledger. Thread-safe.
#pragma once

#include <memory>
#include <string>

#include "base/metrics.h"
#include "base/status.h"
#include "gateway/config.h"
#include "gateway/usage_store.h"

namespace koi::gateway {

class Fleet;

class Gateway {
 public:
  static Result<std::unique_ptr<Gateway>> start(const GatewayConfig& config, std::unique_ptr<UsageStore> store, int threads);
  virtual ~Gateway() = default;
  virtual int port() const = 0;
  virtual int admin_port() const = 0;  // 0 when the admin API is off
  virtual int grpc_port() const = 0;   // 0 when the gRPC API is off (gateway/grpc_api.h)
  virtual Fleet& fleet() = 0;
  virtual metrics::Registry& metrics() = 0;
  virtual void stop() = 0;
};

}  // namespace koi::gateway
