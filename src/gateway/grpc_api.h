// GrpcApi: the gateway's gRPC interface (proto/koi/v1/inference.proto) beside its REST API,
// for internal callers, on `grpc_listen: HOST:PORT`. Complete and Chat are not a second proxy:
// each call becomes the streamed POST /v1/completions (/v1/chat/completions) it stands for (the metadata's `authorization`
// becomes the request's header) and runs through the same Proxy::handle — authentication,
// limits, routing, retries, the usage ledger and metrics are REST's — with a net::Responder
// that turns the relayed server-sent events into CompleteChunk messages and the HTTP status
// of a refusal into a gRPC status (401 UNAUTHENTICATED, 403 PERMISSION_DENIED, 400/413/422
// INVALID_ARGUMENT, 404 NOT_FOUND, 429 RESOURCE_EXHAUSTED, 499 CANCELLED, 5xx UNAVAILABLE).
// CompleteUnary and ChatUnary become the non-streamed POST instead, whose whole answer is the
// one CompleteResponse.
// A gRPC client that cancels is a client that went away (recorded 499, the replica stops).
// The Proxy coroutines run on `io` (the API listener's first io_context); gRPC's own threads
// only post to it. start() returns once the port listens; stop() cancels calls in flight.
#pragma once

#include <boost/asio/io_context.hpp>
#include <memory>
#include <string>

#include "base/status.h"

namespace grpc {
class Server;
}

namespace koi::gateway {

class Fleet;
class Proxy;

class GrpcApi {
 public:
  GrpcApi(Proxy& proxy, Fleet& fleet, boost::asio::io_context& io);
  ~GrpcApi();
  // Binds HOST:PORT (0 picks a free port); returns the bound port.
  Result<int> start(const std::string& host, int port);
  // Cancels the calls in flight and waits for them; `io` must still run. Idempotent.
  void stop();

 private:
  class Service;
  std::unique_ptr<Service> service_;
  std::unique_ptr<grpc::Server> server_;
};

// The gRPC status code for an HTTP status the proxy answered with (exposed for tests).
int grpc_code_for_http(int http_status);

}  // namespace koi::gateway
