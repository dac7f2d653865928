// KvTransferClient: the decode role's end of KV transfer (`koi serve --role decode`). For a
// request that names a prefill worker (the x-koi-prefill-peer header, set by the gateway),
// attach() gives its RequestSpec an engine::KvImport and starts one thread that connects to
// the peer, handshakes, waits for the engine to reserve the prompt's blocks, asks for the
// prompt (skipping the blocks this engine already caches) and writes every BLOCK frame
// straight into the reserved blocks, then hands over the first token (serve/kv_wire.h).
//
// Any failure — connection refused, an incompatible peer, the peer dying mid-transfer, a
// malformed frame — fails the import, and the engine prefills the request itself; the client
// sees no error. The lease (--kv-transfer-timeout) is enforced by the engine, which cancels
// the import and cuts the connection. attach() and stop() are thread-safe.
#pragma once

#include <memory>
#include <string>

#include "base/clock.h"
#include "engine/engine.h"
#include "serve/metrics.h"

namespace koi::serve {

class KvTransferClient {
 public:
  // `metrics` must outlive the client. timeout_s: the lease on reserved blocks.
  KvTransferClient(engine::KvLayout layout, double timeout_s, ServeMetrics& metrics,
                   const Clock& clock = SystemClock::instance());
  ~KvTransferClient();

  // Sets spec.kv_import and starts the transfer from `peer` ("host:port"). If the spec is not
  // submitted after all, cancel its import (spec.kv_import->cancel()).
  void attach(engine::RequestSpec& spec, const std::string& peer);
  // Cancels every transfer and joins their threads; call before the engine goes away.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Checks a peer address ("host:port", port 1-65535); the message names the header.
Status check_peer(const std::string& peer);

}  // namespace koi::serve
