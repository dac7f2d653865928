#include "net/server.h"

#include <sys/resource.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <list>
#include <mutex>
#include <thread>

#include <fmt/format.h>

#include "base/logging.h"

namespace koi::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;

namespace {

constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
// Accepted connections beyond the cap that may wait for their worker to shed an idle one.
constexpr int kAcceptSlack = 64;

std::chrono::steady_clock::duration seconds(double s) {
  return std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(s));
}

// Raises the soft file-descriptor limit to the hard one; returns the soft limit now in force.
int64_t raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return 1024;
  if (rl.rlim_cur < rl.rlim_max) {
    rlimit want = rl;
    want.rlim_cur = rl.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &want) == 0) rl = want;
  }
  return rl.rlim_cur == RLIM_INFINITY ? int64_t{1} << 20 : static_cast<int64_t>(rl.rlim_cur);
}


// Messages are built outside coroutines: GCC 12 miscompiles some temporaries in them.
http::response<http::string_body> make_reply(int status, unsigned version, std::string body, std::string_view content_type,
                                             const Headers& extra, bool keep_alive) {
  http::response<http::string_body> res;
  res.result(static_cast<http::status>(status));
  res.version(version == 10 ? 10 : 11);
  res.set(http::field::server, "koi");
  res.set(http::field::content_type, content_type);
  for (const auto& [k, v] : extra) res.set(k, v);
  res.keep_alive(keep_alive);
  res.body() = std::move(body);
  res.prepare_payload();
  return res;
}

http::response<http::empty_body> make_stream_head(int status, unsigned version, std::string_view content_type,
                                                  const Headers& extra, bool keep_alive, bool chunked) {
  http::response<http::empty_body> head;
  head.result(static_cast<http::status>(status));
  head.version(version == 10 ? 10 : 11);
  head.set(http::field::server, "koi");
  head.set(http::field::content_type, content_type);
  head.set(http::field::cache_control, "no-cache");
  for (const auto& [k, v] : extra) head.set(k, v);
  head.keep_alive(keep_alive);
  if (chunked) head.chunked(true);
  return head;
}

}  // namespace

void log_task_exception(std::exception_ptr e) {
  if (!e) return;
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    log::error("a background task ended by an exception: {}", x.what());
  }
}

std::string_view request_path(const Request& req) {
  std::string_view t = req.target();
  return t.substr(0, t.find('?'));
}

// One worker thread's connections. Touched only on that worker's thread.
struct Connection;
struct Worker {
  asio::io_context io{1};
  std::list<Connection*> idle;  // oldest first
};

std::vector<std::unique_ptr<Worker>> make_workers(int n) {
  std::vector<std::unique_ptr<Worker>> out;
  for (int i = 0; i < std::max(1, n); ++i) out.push_back(std::make_unique<Worker>());
  return out;
}

struct Connection {
  explicit Connection(tcp::socket s) : stream(std::move(s)) {}
  beast::tcp_stream stream;
  std::list<Connection*>::iterator idle_pos;
  bool in_idle = false;
  bool evicted = false;
};

// Cancels the pending operations of a socket when a deadline passes, without closing it,
// so that the server can still answer 408. Single-threaded: lives on the connection's worker.
class Deadline {
 public:
  Deadline(tcp::socket& socket, double after_s) : timer_(socket.get_executor(), seconds(after_s)), state_(std::make_shared<State>()) {
    timer_.async_wait([state = state_, &socket](error_code ec) {
      if (ec || state->done) return;
      state->expired = true;
      error_code ignored;
      socket.cancel(ignored);
    });
  }
  ~Deadline() {
    state_->done = true;
    timer_.cancel();
  }
  bool expired() const { return state_->expired; }

 private:
  struct State {
    bool done = false;
    bool expired = false;
  };
  asio::steady_timer timer_;
  std::shared_ptr<State> state_;
};

struct Server::Impl {
  Impl(ServerOptions o, Handler h) : options(std::move(o)), handler(std::move(h)), workers(make_workers(options.threads)) {
    if (!options.error_body) {
      options.error_body = [](int, std::string_view message, std::string_view) { return std::string(message) + "\n"; };
    }
  }

  ServerOptions options;
  Handler handler;
  std::vector<std::unique_ptr<Worker>> workers;
  tcp::acceptor acceptor{workers[0]->io};
  std::vector<std::thread> threads;
  std::atomic<int> open{0};
  std::atomic<size_t> next_worker{0};
  std::atomic<bool> stopping{false};
  std::atomic<bool> draining{false};  // no keep-alive after the current request
  int port = 0;
  std::mutex mu;
  std::condition_variable stopped_cv;

  awaitable<void> accept_loop();
  awaitable<void> session(Worker& w, tcp::socket socket);
  awaitable<bool> read_request(Connection& c, beast::flat_buffer& buf, std::optional<http::request_parser<http::string_body>>& parser);
  awaitable<void> send_error(Connection& c, unsigned version, int status, std::string_view message, std::string_view code);

  void set_idle(Worker& w, Connection& c, bool idle) {
    if (idle == c.in_idle) return;
    if (idle) {
      c.idle_pos = w.idle.insert(w.idle.end(), &c);
    } else {
      w.idle.erase(c.idle_pos);
    }
    c.in_idle = idle;
  }
  // Closes the oldest idle connection of `w` other than `self`; false when there is none.
  bool evict_one(Worker& w, const Connection& self) {
    for (Connection* c : w.idle) {
      if (c == &self) continue;
      set_idle(w, *c, false);
      c->evicted = true;
      error_code ignored;
      c->stream.socket().close(ignored);
      return true;
    }
    return false;
  }
};

class ResponderImpl final : public Responder {
 public:
  ResponderImpl(Connection& c, const Request& req, const ServerOptions& o, bool keep_alive)
      : c_(c), version_(req.version()), options_(o), keep_alive_(keep_alive) {}
  ~ResponderImpl() override { stop_watching(); }

  bool keep_alive() const override { return keep_alive_ && !failed_; }
  bool streaming() const override { return streaming_; }

  awaitable<bool> send(int status, std::string body, std::string_view content_type, const Headers& extra) override {
    auto res = make_reply(status, version_, std::move(body), content_type, extra, keep_alive_);
    c_.stream.expires_after(seconds(options_.write_timeout_s));
    auto [ec, n] = co_await http::async_write(c_.stream, res, kAwait);
    if (ec) failed_ = true;
    co_return !ec;
  }

  awaitable<bool> begin_stream(int status, std::string_view content_type, const Headers& extra) override {
    streaming_ = true;
    chunked_ = version_ >= 11;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the body is the end of the connection
    auto head = make_stream_head(status, version_, content_type, extra, keep_alive_, chunked_);
    http::response_serializer<http::empty_body> sr{head};
    c_.stream.expires_after(seconds(options_.write_timeout_s));
    auto [ec, n] = co_await http::async_write_header(c_.stream, sr, kAwait);
    if (ec) failed_ = true;
    co_return !ec;
  }

  awaitable<bool> write(std::string_view data) override {
    if (failed_) co_return false;
    if (data.empty()) co_return true;
    c_.stream.expires_after(seconds(options_.write_timeout_s));
    error_code ec;
    if (chunked_) {
      std::tie(ec, std::ignore) = co_await asio::async_write(c_.stream, http::make_chunk(asio::buffer(data.data(), data.size())), kAwait);
    } else {
      std::tie(ec, std::ignore) = co_await asio::async_write(c_.stream, asio::buffer(data.data(), data.size()), kAwait);
    }
    if (ec) failed_ = true;
    co_return !ec;
  }

  awaitable<bool> end_stream() override {
    if (failed_) co_return false;
    if (!chunked_) co_return true;  // the session closes the connection
    c_.stream.expires_after(seconds(options_.write_timeout_s));
    auto [ec, n] = co_await asio::async_write(c_.stream, http::make_chunk_last(), kAwait);
    if (ec) failed_ = true;
    co_return !ec;
  }

  void abort() override {
    failed_ = true;
    error_code ignored;
    c_.stream.socket().shutdown(tcp::socket::shutdown_both, ignored);
  }

  void watch_disconnect(std::function<void()> on_gone) override {
    if (watch_) return;
    watch_ = std::make_shared<Watch>();
    watch_->on_gone = std::move(on_gone);
    tcp::socket& socket = c_.stream.socket();
    socket.async_wait(tcp::socket::wait_read, [w = watch_, &socket](error_code ec) {
      if (ec || !w->active) return;
      char ch;
      const ssize_t r = ::recv(socket.native_handle(), &ch, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0 || (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        w->active = false;
        w->on_gone();
      }
    });
  }

 private:
  struct Watch {
    bool active = true;
    std::function<void()> on_gone;
  };
  void stop_watching() {
    if (!watch_ || !watch_->active) return;
    watch_->active = false;
    error_code ignored;
    c_.stream.socket().cancel(ignored);
  }

  Connection& c_;
  unsigned version_;
  const ServerOptions& options_;
  bool keep_alive_;
  bool streaming_ = false, chunked_ = false, failed_ = false;
  std::shared_ptr<Watch> watch_;
};

Server::Server(ServerOptions options, Handler handler) : impl_(std::make_unique<Impl>(std::move(options), std::move(handler))) {}

Server::~Server() {
  stop();
  wait();
}

Result<int> Server::listen() {
  Impl& s = *impl_;
  if (s.options.port < 0 || s.options.port > 65535) {
    return Status::invalid_argument(fmt::format("port {} is out of range [0, 65535]", s.options.port));
  }
  error_code ec;
  const auto address = asio::ip::make_address(s.options.host, ec);
  if (ec) return Status::invalid_argument(fmt::format("listen address '{}' is not an IP address", s.options.host));
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(s.options.port));
  s.acceptor.open(endpoint.protocol(), ec);
  if (!ec) s.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(endpoint, ec);
  if (!ec) s.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::io_error(fmt::format("cannot listen on {}:{}: {}; pick another port or stop what holds it",
                                        s.options.host, s.options.port, ec.message()));
  }
  // Leave descriptors for model files, the store and upstream connections.
  const int64_t fd_limit = raise_fd_limit();
  const int64_t room = std::max<int64_t>(16, fd_limit - 256 - kAcceptSlack);
  if (s.options.max_connections > room) {
    log::info("http: max connections {} capped at {} (file descriptor limit {})", s.options.max_connections, room, fd_limit);
    s.options.max_connections = static_cast<int>(room);
  }
  s.port = s.acceptor.local_endpoint().port();
  return s.port;
}

void Server::start() {
  Impl& s = *impl_;
  asio::co_spawn(s.workers[0]->io, s.accept_loop(), log_task_exception);
  for (auto& w : s.workers) {
    s.threads.emplace_back([&io = w->io] {
      auto guard = asio::make_work_guard(io);
      io.run();
    });
  }
}

void Server::close_listener() {
  Impl& s = *impl_;
  s.draining = true;
  asio::post(s.workers[0]->io, [&s] {
    error_code ignored;
    s.acceptor.close(ignored);
  });
}

void Server::stop() {
  Impl& s = *impl_;
  {
    std::lock_guard lock(s.mu);
    s.stopping = true;
  }
  for (auto& w : s.workers) w->io.stop();
  s.stopped_cv.notify_all();
}

void Server::wait() {
  Impl& s = *impl_;
  {
    std::unique_lock lock(s.mu);
    s.stopped_cv.wait(lock, [&] { return s.stopping.load(); });
  }
  for (auto& t : s.threads) {
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  }
}

int Server::port() const { return impl_->port; }
int Server::open_connections() const { return impl_->open.load(); }
asio::io_context& Server::context() { return impl_->workers[0]->io; }

awaitable<void> Server::Impl::accept_loop() {
  asio::steady_timer backoff(workers[0]->io);
  for (;;) {
    // Sockets accepted but not yet started by their worker count too; when workers lag that
    // far behind, new connections wait in the kernel's backlog instead of taking descriptors.
    if (open.load() >= options.max_connections + kAcceptSlack) {
      backoff.expires_after(std::chrono::milliseconds(1));
      co_await backoff.async_wait(kAwait);
      continue;
    }
    Worker& w = *workers[next_worker++ % workers.size()];
    auto [ec, socket] = co_await acceptor.async_accept(w.io, kAwait);
    if (ec) {
      if (!acceptor.is_open() || ec == asio::error::operation_aborted) co_return;
      // Out of descriptors (EMFILE/ENFILE) or a transient error: back off rather than spin.
      log::warn("http: accept failed: {}", ec.message());
      backoff.expires_after(std::chrono::milliseconds(50));
      co_await backoff.async_wait(kAwait);
      continue;
    }
    error_code ignored;
    socket.set_option(tcp::no_delay(true), ignored);
    ++open;  // counted from accept; the session's end gives it back
    asio::co_spawn(w.io, session(w, std::move(socket)), log_task_exception);
  }
}

awaitable<void> Server::Impl::send_error(Connection& c, unsigned version, int status, std::string_view message,
                                         std::string_view code) {
  Headers extra;
  if (status == 503) extra.emplace_back("Retry-After", "1");
  auto res = make_reply(status, version, options.error_body(status, message, code), options.error_content_type, extra, false);
  c.stream.expires_after(seconds(options.write_timeout_s));
  co_await http::async_write(c.stream, res, kAwait);
}

// Reads one request into `parser`. False when the connection should close (the peer left,
// timed out, or sent something the server already answered with an error).
awaitable<bool> Server::Impl::read_request(Connection& c, beast::flat_buffer& buf,
                                           std::optional<http::request_parser<http::string_body>>& parser) {
  tcp::socket& socket = c.stream.socket();
  c.stream.expires_never();  // reads use Deadline; tcp_stream's own expiry guards writes only
  if (buf.size() == 0) {
    Deadline idle(socket, options.idle_timeout_s);
    auto [ec] = co_await socket.async_wait(tcp::socket::wait_read, kAwait);
    if (ec || idle.expired() || c.evicted) co_return false;
  }
  parser.emplace();
  parser->header_limit(static_cast<uint32_t>(std::min<size_t>(options.max_header_bytes, UINT32_MAX)));
  parser->body_limit(options.max_body_bytes);
  error_code ec;
  bool expired = false;
  {
    Deadline header(socket, options.header_timeout_s);
    std::tie(ec, std::ignore) = co_await http::async_read_header(c.stream, buf, *parser, kAwait);
    expired = header.expired();
  }
  if (!ec && !parser->is_done()) {
    Deadline body(socket, options.body_timeout_s);
    std::tie(ec, std::ignore) = co_await http::async_read(c.stream, buf, *parser, kAwait);
    expired = body.expired();
  }
  if (c.evicted) co_return false;
  const unsigned version = parser->is_header_done() ? parser->get().version() : 11;
  if (expired) {
    if (parser->got_some()) {
      co_await send_error(c, version, 408, "the request did not arrive within the time limit", "request_timeout");
    }
    co_return false;
  }
  if (!ec) co_return true;
  if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::connection_reset) co_return false;
  if (ec == http::error::body_limit) {
    co_await send_error(c, version, 413, fmt::format("the request body is over the limit of {} bytes", options.max_body_bytes),
                        "request_too_large");
  } else if (ec == http::error::header_limit) {
    co_await send_error(c, version, 431, fmt::format("the request headers are over the limit of {} bytes", options.max_header_bytes),
                        "request_header_fields_too_large");
  } else {
    co_await send_error(c, version, 400, "malformed HTTP request: " + ec.message(), "bad_request");
  }
  co_return false;
}

awaitable<void> Server::Impl::session(Worker& w, tcp::socket socket) {
  Connection c(std::move(socket));
  struct Count {
    std::atomic<int>& n;
    ~Count() { --n; }
  } count{open};
  if (open.load() > options.max_connections && !evict_one(w, c)) {
    co_await send_error(c, 11, 503, "the server is at its connection limit; retry shortly", "too_many_connections");
  } else {
    beast::flat_buffer buf;
    for (;;) {
      set_idle(w, c, true);
      std::optional<http::request_parser<http::string_body>> parser;
      const bool got = co_await read_request(c, buf, parser);
      if (c.evicted) break;
      set_idle(w, c, false);
      if (!got) break;
      Request req = parser->release();
      const bool keep = req.keep_alive() && !draining.load();
      ResponderImpl responder(c, req, options, keep);
      co_await handler(req, responder);
      if (!responder.keep_alive()) break;
    }
    set_idle(w, c, false);
  }
  error_code ignored;
  c.stream.socket().shutdown(tcp::socket::shutdown_send, ignored);
}

}  // namespace koi::net
