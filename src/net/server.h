// net::Server: Koi's one HTTP/1.x server (koi serve, koi gateway, koi cluster), on Boost.Beast.
//
// A Server owns `threads` single-threaded io_contexts, one per worker thread; an accepted
// connection lives on one of them for its whole life, so its coroutine needs no strand.
// Each request is handed to the Handler with a Responder, through which the handler sends
// one whole reply or streams one (chunked for HTTP/1.1; close-delimited for HTTP/1.0, which
// has no chunked encoding). The server itself answers what never reaches a handler:
//   400 malformed request, 408 headers or body too slow (`header_timeout_s`, `body_timeout_s`),
//   413 body over `max_body_bytes`, 431 headers over `max_header_bytes`, and 503 when every
//   one of `max_connections` connections is busy in a handler.
// Limits against clients that hold connections cheaply: an open connection that is not in a
// handler (waiting for its next request, or sending headers) is idle; when a new connection
// would exceed `max_connections`, the oldest idle connection on that worker is closed to make
// room, so a flood of idle connections can never lock out /health or real clients. A
// keep-alive connection idle for `idle_timeout_s` is closed. accept() failing for want of file
// descriptors backs off briefly instead of spinning. listen() raises RLIMIT_NOFILE to its hard
// limit and caps max_connections below it.
//
// Lifecycle: listen() binds (errors come back as Status); start() runs the worker threads and
// returns; close_listener() stops accepting while requests finish; stop() stops every
// worker and joins them (call it from outside the workers; the destructor calls it).
// All public methods are thread-safe.
#pragma once

#include <atomic>
#include <boost/asio/awaitable.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/beast/http/message.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstddef>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace koi::net {

using Request = boost::beast::http::request<boost::beast::http::string_body>;
using Headers = std::vector<std::pair<std::string, std::string>>;

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;                          // 0: any free port (listen() returns it)
  int threads = 1;
  size_t max_body_bytes = 4 << 20;       // 413 beyond
  size_t max_header_bytes = 16 << 10;    // 431 beyond
  double header_timeout_s = 10;          // first byte to the end of the headers: 408 beyond
  double body_timeout_s = 30;            // the body after the headers: 408 beyond
  double idle_timeout_s = 60;            // keep-alive wait for the next request
  double write_timeout_s = 30;           // per write; a client that does not read is dropped
  int max_connections = 8192;            // open connections (see above)
  // The body of the server's own error replies (400, 408, 413, 431, 503), e.g. OpenAI-shaped
  // JSON; `code` is a short machine name ("request_timeout"). Default: the message as text.
  std::function<std::string(int status, std::string_view message, std::string_view code)> error_body;
  std::string error_content_type = "text/plain";
};

// One request's way back to its client. Used only by the handler's coroutine.
class Responder {
 public:
  virtual ~Responder() = default;
  // True when the connection may carry another request after this one.
  virtual bool keep_alive() const = 0;
  // Sends a whole reply. False when the client is gone (the connection then closes).
  virtual boost::asio::awaitable<bool> send(int status, std::string body, std::string_view content_type,
                                            const Headers& extra) = 0;
  boost::asio::awaitable<bool> send(int status, std::string body, std::string_view content_type) {
    return send(status, std::move(body), content_type, no_headers());
  }
  // Streams a reply: headers now, then write() each piece as it is ready (each goes out at
  // once, as one chunk), then end_stream(). False when the client is gone.
  virtual boost::asio::awaitable<bool> begin_stream(int status, std::string_view content_type,
                                                    const Headers& extra) = 0;
  boost::asio::awaitable<bool> begin_stream(int status, std::string_view content_type) {
    return begin_stream(status, content_type, no_headers());
  }
  virtual boost::asio::awaitable<bool> write(std::string_view data) = 0;
  virtual boost::asio::awaitable<bool> end_stream() = 0;
  virtual bool streaming() const = 0;
  // Ends a streamed reply as cut: the connection closes without the end of the body, so the
  // client cannot take it for complete.
  virtual void abort() = 0;
  // Calls `on_gone` (once, on the connection's thread) if the client closes the connection
  // while the handler runs, without consuming request bytes. Ends with the handler.
  virtual void watch_disconnect(std::function<void()> on_gone) = 0;

 protected:
  // Default arguments would be braced temporaries in the caller's co_await, which GCC 12
  // destroys twice; the overloads above pass this instead.
  static const Headers& no_headers() {
    static const Headers empty;
    return empty;
  }
};

using Handler = std::function<boost::asio::awaitable<void>(Request& req, Responder& res)>;

class Server {
 public:
  Server(ServerOptions options, Handler handler);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Binds and listens; returns the bound port.
  Result<int> listen();
  // Runs the worker threads; returns at once. Call after listen().
  void start();
  // Stops accepting new connections; open ones finish their current request, without keep-alive.
  void close_listener();
  // Stops the workers (in-flight handlers are abandoned) and joins them.
  void stop();
  // Blocks until stop() has been called (from another thread or a handler's post()).
  void wait();

  int port() const;
  int open_connections() const;
  // The io_context of worker 0, for the owner's timers, signals and shutdown sequencing.
  boost::asio::io_context& context();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The completion of a detached coroutine (co_spawn) on a server's context: an exception that
// escaped it is a bug, logged.
void log_task_exception(std::exception_ptr e);

// "GET" and "/path" of a request with the query removed; for routing.
std::string_view request_path(const Request& req);

}  // namespace koi::net
