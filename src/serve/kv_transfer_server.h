// KvTransferServer: the prefill role's end of KV transfer (`koi serve --role prefill
// --kv-port N`). Decode workers connect, prove their KV layout matches (a mismatch gets an
// ERROR frame naming the field and the connection closes), and send one prompt; the server
// prefills it on this worker's engine (max_tokens 1, with an engine::KvExport) and streams each
// block's layers as the engine completes them, then the first token and sampler state
// (serve/kv_wire.h, docs/kv-transfer.md).
//
// If the decode worker goes away (a failed send, or its end of the socket closes while the
// prompt is still computing) the request is aborted, which frees its blocks: the pool's usage
// returns to where it was. One thread accepts; one thread serves each connection.
// listen() and start() are called once, stop() (also from the destructor) from any thread.
#pragma once

#include <atomic>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "base/status.h"
#include "engine/kv_transfer.h"
#include "serve/engine_service.h"

namespace koi::serve {

class KvTransferServer {
 public:
  // `service` must outlive the server. layout: this engine's KV layout with its model fingerprint.
  KvTransferServer(engine::KvLayout layout, EngineService& service);
  ~KvTransferServer();

  // Binds and listens; returns the bound port (port 0: any free one).
  Result<int> listen(const std::string& host, int port);
  void start();
  // Stops accepting, cuts every connection, aborts their requests and joins the threads.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace koi::serve
