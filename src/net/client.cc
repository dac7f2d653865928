#include "net/client.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/url/parse.hpp>
#include <cerrno>
#include <deque>
#include <limits>
#include <map>
#include <mutex>

#include <fmt/format.h>

namespace koi::net {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using boost::system::error_code;

namespace {
constexpr auto kAwait = asio::as_tuple(asio::use_awaitable);
constexpr auto kPoolIdleLimit = std::chrono::seconds(20);  // below the servers' idle timeouts
constexpr size_t kChunkBytes = 16384;

// A connection the upstream closed (or that has stray bytes) is not reusable.
bool still_open(tcp::socket& s) {
  char c;
  const ssize_t r = ::recv(s.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK);
}
// Built outside coroutines: GCC 12 miscompiles some temporaries in them.
http::request<http::string_body> make_request(ClientRequest req, const std::string& host, const std::string& port) {
  http::request<http::string_body> msg;
  msg.method(http::string_to_verb(req.method));
  msg.target(req.target);
  msg.version(11);
  msg.set(http::field::host, host + ":" + port);
  bool has_type = false;
  for (const auto& [k, v] : req.headers) {
    msg.set(k, v);
    has_type = has_type || beast::iequals(k, "content-type");
  }
  if (!req.body.empty() && !has_type) msg.set(http::field::content_type, "application/json");
  msg.body() = std::move(req.body);
  msg.keep_alive(true);
  msg.prepare_payload();
  return msg;
}

Status stage_error(const boost::system::error_code& ec, const std::string& where, std::string_view stage,
                   std::chrono::milliseconds limit) {
  if (ec == beast::error::timeout) {
    return Status::deadline_exceeded(fmt::format("{}: {}: {} after {} ms", where, stage, ec.message(), limit.count()));
  }
  return Status::unavailable(fmt::format("{}: {}: {}", where, stage, ec.message()));
}

}  // namespace

Result<Url> parse_url(std::string_view url) {
  auto u = boost::urls::parse_absolute_uri(url);
  if (!u || u->scheme() != "http" || u->host().empty()) {
    return Status::invalid_argument(fmt::format("URL '{}' must read http://HOST:PORT/...", url));
  }
  Url out;
  out.host = std::string(u->host());
  out.port = u->has_port() ? std::string(u->port()) : "80";
  const int port = std::atoi(out.port.c_str());
  if (port < 1 || port > 65535) return Status::invalid_argument(fmt::format("URL '{}': port must be in [1, 65535]", url));
  out.target = std::string(u->encoded_target());
  if (out.target.empty()) out.target = "/";
  return out;
}

std::string resolve_host(const std::string& host) {
  error_code ec;
  asio::ip::make_address(host, ec);
  if (!ec) return host;
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0 || !res) return host;
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(res->ai_addr)->sin_addr, buf, sizeof buf);
  freeaddrinfo(res);
  return buf;
}

struct UpstreamConn {
  std::unique_ptr<beast::tcp_stream> stream;
  beast::flat_buffer buf;
  std::chrono::steady_clock::time_point idle_since;
};

struct Client::Pool {
  explicit Pool(size_t m) : max_idle(m) {}
  using Key = std::pair<const void*, std::string>;  // (io_context, host:port)
  size_t max_idle;
  mutable std::mutex mu;
  bool closed = false;  // after close_idle(): connections are closed, not pooled
  std::map<Key, std::deque<UpstreamConn>> idle;

  std::optional<UpstreamConn> take(const Key& key) {
    std::lock_guard lock(mu);
    auto it = idle.find(key);
    if (it == idle.end()) return std::nullopt;
    const auto now = std::chrono::steady_clock::now();
    while (!it->second.empty()) {
      UpstreamConn c = std::move(it->second.back());  // the most recently used is the likeliest alive
      it->second.pop_back();
      if (now - c.idle_since < kPoolIdleLimit && still_open(c.stream->socket())) return c;
    }
    return std::nullopt;
  }
  void put(const Key& key, UpstreamConn c) {
    std::lock_guard lock(mu);
    if (closed) return;  // `c` closes here
    auto& q = idle[key];
    if (q.size() >= max_idle) q.pop_front();
    c.idle_since = std::chrono::steady_clock::now();
    q.push_back(std::move(c));
  }
};

struct Exchange::State {
  std::shared_ptr<Client::Pool> pool;
  Client::Pool::Key key;
  UpstreamConn conn;
  std::optional<http::response_parser<http::buffer_body>> parser;
  Timeouts timeouts;
  std::string where;
  bool failed = false;
  char chunk[kChunkBytes];
};

Exchange::Exchange(std::unique_ptr<State> s) : s_(std::move(s)) {}

Exchange::~Exchange() {
  if (!s_ || !s_->conn.stream) return;
  if (!s_->failed && s_->parser->is_done() && s_->parser->keep_alive() && s_->conn.buf.size() == 0) {
    s_->conn.stream->expires_never();
    s_->pool->put(s_->key, std::move(s_->conn));
    return;
  }
  error_code ignored;
  s_->conn.stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  s_->conn.stream->socket().close(ignored);
}

int Exchange::status() const { return static_cast<int>(s_->parser->get().result_int()); }

std::string_view Exchange::header(std::string_view name) const {
  auto it = s_->parser->get().find(beast::string_view(name.data(), name.size()));
  if (it == s_->parser->get().end()) return {};
  return std::string_view(it->value().data(), it->value().size());
}

bool Exchange::done() const { return s_->parser->is_done(); }

void Exchange::abort() {
  s_->failed = true;
  error_code ignored;
  s_->conn.stream->socket().shutdown(tcp::socket::shutdown_both, ignored);
  s_->conn.stream->socket().close(ignored);
}

awaitable<Result<std::string_view>> Exchange::read_some() {
  State& s = *s_;
  while (!s.parser->is_done()) {
    if (s.failed) co_return Status::unavailable(s.where + ": the response was already cut");
    auto& body = s.parser->get().body();
    body.data = s.chunk;
    body.size = sizeof s.chunk;
    s.conn.stream->expires_after(s.timeouts.idle);
    auto [ec, n] = co_await http::async_read_some(*s.conn.stream, s.conn.buf, *s.parser, kAwait);
    if (ec == http::error::need_buffer) ec = {};
    if (ec) {
      s.failed = true;
      if (ec == beast::error::timeout) {
        co_return Status::deadline_exceeded(fmt::format("{}: no body bytes for {} ms", s.where, s.timeouts.idle.count()));
      }
      co_return Status::unavailable(fmt::format("{}: the response was cut: {}", s.where, ec.message()));
    }
    const size_t got = sizeof s.chunk - s.parser->get().body().size;
    if (got > 0) co_return std::string_view(s.chunk, got);
  }
  co_return std::string_view{};
}

awaitable<Result<std::string>> Exchange::read_all(size_t limit) {
  std::string out;
  for (;;) {
    auto piece = co_await read_some();
    if (!piece.ok()) co_return piece.status();
    if (piece->empty() && done()) co_return out;
    if (out.size() + piece->size() > limit) {
      s_->failed = true;
      co_return Status::resource_exhausted(fmt::format("{}: the response is over {} bytes", s_->where, limit));
    }
    out.append(*piece);
  }
}

Client::Client(size_t max_idle_per_upstream) : pool_(std::make_shared<Pool>(max_idle_per_upstream)) {}
Client::~Client() { close_idle(); }

void Client::close_idle() {
  std::map<Pool::Key, std::deque<UpstreamConn>> dropped;
  {
    std::lock_guard lock(pool_->mu);
    pool_->closed = true;
    dropped.swap(pool_->idle);
  }
}

size_t Client::idle_connections() const {
  std::lock_guard lock(pool_->mu);
  size_t n = 0;
  for (const auto& [k, q] : pool_->idle) n += q.size();
  return n;
}

awaitable<Result<std::unique_ptr<Exchange>>> Client::open(std::string host, std::string port, ClientRequest req,
                                                          Timeouts timeouts) {
  auto executor = co_await asio::this_coro::executor;
  const void* context = &asio::query(executor, asio::execution::context);
  const std::string where = fmt::format("http://{}:{}{}", host, port, req.target);
  error_code addr_ec;
  const tcp::endpoint endpoint(asio::ip::make_address(host, addr_ec), static_cast<uint16_t>(std::atoi(port.c_str())));
  if (addr_ec) co_return Status::unavailable(where + ": '" + host + "' is not an IP address (resolve it first)");

  http::request<http::string_body> msg = make_request(std::move(req), host, port);
  auto state = std::make_unique<Exchange::State>();
  state->pool = pool_;
  state->key = {context, host + ":" + port};
  state->timeouts = timeouts;
  state->where = where;
  for (int attempt = 0;; ++attempt) {
    std::optional<UpstreamConn> pooled = attempt == 0 ? pool_->take(state->key) : std::nullopt;
    const bool reused = pooled.has_value();
    if (reused) {
      state->conn = std::move(*pooled);
    } else {
      state->conn = UpstreamConn{std::make_unique<beast::tcp_stream>(executor), {}, {}};
      state->conn.stream->expires_after(timeouts.connect);
      auto [ec] = co_await state->conn.stream->async_connect(endpoint, kAwait);
      if (ec) co_return stage_error(ec, where, "connect", timeouts.connect);
      error_code ignored;
      state->conn.stream->socket().set_option(tcp::no_delay(true), ignored);
    }
    state->conn.stream->expires_after(timeouts.first_byte);
    auto [wec, wn] = co_await http::async_write(*state->conn.stream, msg, kAwait);
    if (wec) {
      if (reused) continue;
      co_return stage_error(wec, where, "write", timeouts.first_byte);
    }
    state->parser.emplace();
    state->parser->body_limit(std::numeric_limits<std::uint64_t>::max());
    auto [hec, hn] = co_await http::async_read_header(*state->conn.stream, state->conn.buf, *state->parser, kAwait);
    if (hec) {
      const bool closed_unseen = hec == http::error::end_of_stream || hec == asio::error::eof ||
                                 hec == asio::error::connection_reset || hec == asio::error::broken_pipe;
      if (reused && closed_unseen && !state->parser->got_some()) continue;
      co_return stage_error(hec, where, "no response", timeouts.first_byte);
    }
    co_return std::unique_ptr<Exchange>(new Exchange(std::move(state)));
  }
}

awaitable<Result<Response>> Client::call(std::string host, std::string port, ClientRequest req, Timeouts timeouts) {
  auto ex = co_await open(std::move(host), std::move(port), std::move(req), timeouts);
  if (!ex.ok()) co_return ex.status();
  Response r;
  r.status = (*ex)->status();
  r.content_type = std::string((*ex)->header("content-type"));
  auto body = co_await (*ex)->read_all();
  if (!body.ok()) co_return body.status();
  r.body = std::move(*body);
  co_return r;
}

Result<Response> Client::fetch(const std::string& url, const std::string& method, const std::string& body,
                               const Headers& headers, std::chrono::milliseconds timeout) {
  KOI_ASSIGN_OR_RETURN(Url u, parse_url(url));
  asio::io_context io;
  Client client(1);
  std::optional<Result<Response>> out;
  ClientRequest req{method, u.target, headers, body};
  auto run = [&]() -> awaitable<void> {
    out.emplace(co_await client.call(resolve_host(u.host), u.port, std::move(req), Timeouts{timeout, timeout, timeout}));
  };
  asio::co_spawn(io, run(), asio::detached);
  io.run();
  if (!out) return Status::internal(url + ": the HTTP client stopped without an answer");
  return std::move(*out);
}

}  // namespace koi::net
