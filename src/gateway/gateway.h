// Gateway: the running `koi gateway` — an OpenAI-compatible front door on one port and the
// admin API on another, over Boost.Beast: one coroutine per connection, connections spread
// over `threads` single-threaded io_contexts (one per worker thread).
//
// Per request: authenticate the Bearer key -> admit (Fleet) -> pick a replica -> proxy. An
// attempt that fails before the replica's first byte (refused, reset, timed out, or a 5xx
// status) is retried on another replica, up to max_attempts; after the first byte the
// response streams through: SSE events are relayed as they complete (the stream's usage chunk
// is always requested upstream and dropped again when the client did not ask for it). The
// usage record goes through the Ledger and the end of the response — the body of a plain
// response, "data: [DONE]" of a stream — is sent only once it is committed, so every request a
// client saw complete has exactly one durable record. A client that goes away closes the
// upstream connection (the replica sees the disconnect) and is recorded with status 499.
// Timeouts: connect, first byte, and idle between reads on both sides.
//
// Admin API (Authorization: Bearer <admin key>): GET /admin/state, GET /admin/stats,
// POST/DELETE /admin/replicas {model, version, url}, POST /admin/weights {model, weights},
// POST /admin/tenants {name, rpm, tpm, max_concurrency, priority, models},
// POST /admin/keys {tenant} -> {id, key}, DELETE /admin/keys/<id>.
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
  virtual Fleet& fleet() = 0;
  virtual metrics::Registry& metrics() = 0;
  virtual void stop() = 0;
};

}  // namespace koi::gateway
