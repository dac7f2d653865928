// net::Client: Koi's one HTTP/1.1 client (the gateway's proxy and health checks, the load
// generator, the CLI's admin calls, tests and benchmarks), on Boost.Beast.
//
// A Client keeps a pool of idle keep-alive connections per (worker io_context, upstream
// host:port), so a proxy on N single-threaded io_contexts reuses connections without moving
// a socket between threads. open() sends a request and returns once the response headers
// have arrived; the returned Exchange then hands over body bytes as they arrive (read_some
// returns after one read from the socket, never waiting to fill a buffer), which is what a
// relay of server-sent events needs. An Exchange whose response was read to its end on a
// keep-alive connection returns that connection to the pool when it is destroyed; any other
// is closed (the upstream sees the disconnect at once).
// A pooled connection the upstream closed while it sat idle is detected and replaced: a
// request that fails on a reused connection before any response byte is sent once more on a
// new connection (the upstream never saw it complete).
// Failures are Status values: kUnavailable (refused, reset, closed early), kDeadlineExceeded
// (a timeout), kInvalidArgument (bad URL). A Client is thread-safe; an Exchange is used by one
// coroutine. An Exchange may outlive its Client (its connection is then closed, not pooled);
// the io_contexts connections were opened on must outlive the Client, or the owner must call
// close_idle() first (pooled sockets belong to those io_contexts).
// Pass ClientRequest and Timeouts as named values, not braced temporaries: GCC 12 destroys a
// braced temporary inside a co_await expression twice.
#pragma once

#include <boost/asio/any_io_executor.hpp>
#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "net/server.h"

namespace koi::net {

// http://host:port/target
struct Url {
  std::string host;
  std::string port;     // "80" when absent
  std::string target;   // "/" when absent; includes the query
};
Result<Url> parse_url(std::string_view url);
// The IPv4 address of `host` ("127.0.0.1" for "localhost"); `host` itself if it is an address
// already or cannot be resolved (the connect then fails and says so). Blocking (getaddrinfo):
// resolve once, when an upstream is added, never on a request path.
std::string resolve_host(const std::string& host);

struct Timeouts {
  std::chrono::milliseconds connect{2000};
  std::chrono::milliseconds first_byte{60000};  // request written -> response headers
  std::chrono::milliseconds idle{30000};        // between two reads of the body
};

struct ClientRequest {
  std::string method = "GET";
  std::string target = "/";
  Headers headers;
  std::string body;  // sent with Content-Type: application/json unless headers say otherwise
};

struct Response {
  int status = 0;
  std::string content_type;
  std::string body;
};

class Client;

// One response being read. Not thread-safe; destroy it before its Client.
class Exchange {
 public:
  ~Exchange();
  int status() const;
  std::string_view header(std::string_view name) const;
  // The next bytes of the body as they arrive: a view valid until the next call. An empty
  // view with done() true is the end; an error means the body was cut (the upstream closed,
  // reset, or was silent for Timeouts::idle).
  boost::asio::awaitable<Result<std::string_view>> read_some();
  // The rest of the body, at most `limit` bytes.
  boost::asio::awaitable<Result<std::string>> read_all(size_t limit = 256 << 20);
  bool done() const;
  // Closes the connection now (the upstream sees the disconnect); a pending read_some()
  // fails. For a relay whose client went away.
  void abort();

 private:
  friend class Client;
  struct State;
  explicit Exchange(std::unique_ptr<State> s);
  std::unique_ptr<State> s_;
};

class Client {
 public:
  explicit Client(size_t max_idle_per_upstream = 64);
  ~Client();

  // Sends `req` to host:port (an IP address; see resolve_host) on the calling coroutine's
  // executor and returns once the response headers arrived.
  boost::asio::awaitable<Result<std::unique_ptr<Exchange>>> open(std::string host, std::string port, ClientRequest req,
                                                                 Timeouts timeouts);
  // open() and read_all().
  boost::asio::awaitable<Result<Response>> call(std::string host, std::string port, ClientRequest req, Timeouts timeouts);

  // The blocking form for the CLI and tests: `url` is http://host:port/path; one deadline
  // covers connect, first byte and the body.
  static Result<Response> fetch(const std::string& url, const std::string& method, const std::string& body,
                                const Headers& headers, std::chrono::milliseconds timeout);

  size_t idle_connections() const;
  // Closes every pooled connection; from then on connections are closed, not pooled. Call it
  // while the io_contexts the connections belong to still exist and none runs (an owner that
  // has stopped and joined its threads); the destructor calls it.
  void close_idle();

 private:
  friend class Exchange;
  struct Pool;
  std::shared_ptr<Pool> pool_;  // shared with live Exchanges, which may outlive the Client
};

}  // namespace koi::net
