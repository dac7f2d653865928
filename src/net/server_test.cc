#include "net/server.h"

#include <gtest/gtest.h>

#include <atomic>
#include <boost/asio.hpp>
#include <chrono>
#include <future>
#include <thread>

#include "net/client.h"

namespace koi::net {
namespace {

namespace asio = boost::asio;
using tcp = asio::ip::tcp;
using namespace std::chrono_literals;

// A blocking raw HTTP exchange: sends `bytes`, returns everything until the server closes
// (or `wait` passes).
std::string raw(int port, const std::string& bytes, std::chrono::milliseconds wait = 3000ms) {
  asio::io_context io;
  tcp::socket s(io);
  s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port)});
  asio::write(s, asio::buffer(bytes));
  std::string out;
  const auto end = std::chrono::steady_clock::now() + wait;
  s.non_blocking(true);
  char buf[4096];
  while (std::chrono::steady_clock::now() < end) {
    boost::system::error_code ec;
    const size_t n = s.read_some(asio::buffer(buf), ec);
    if (ec == asio::error::would_block) {
      std::this_thread::sleep_for(5ms);
      continue;
    }
    if (ec) break;
    out.append(buf, n);
  }
  return out;
}

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions o, Handler h) {
    server_ = std::make_unique<Server>(std::move(o), std::move(h));
    auto port = server_->listen();
    ASSERT_TRUE(port.ok()) << port.status().message();
    port_ = *port;
    server_->start();
  }
  std::string url(const std::string& path) const { return "http://127.0.0.1:" + std::to_string(port_) + path; }
  std::unique_ptr<Server> server_;
  int port_ = 0;
};

Handler echo() {
  return [](Request& req, Responder& res) -> asio::awaitable<void> {
    std::string body = std::string(request_path(req)) + ":" + req.body();  // named: see client.h on GCC 12
    co_await res.send(200, std::move(body), "text/plain");
  };
}

TEST_F(ServerTest, AnswersAndKeepsTheConnectionAlive) {
  start({}, echo());
  auto r = Client::fetch(url("/a?x=1"), "POST", "hi", {}, 2000ms);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "/a:hi");
  const std::string two = raw(port_, "GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(two.find("/1:"), std::string::npos) << two;
  EXPECT_NE(two.find("/2:"), std::string::npos) << two;
}

TEST_F(ServerTest, BodyOverTheLimitIs413) {
  ServerOptions o;
  o.max_body_bytes = 10;
  start(o, echo());
  auto r = Client::fetch(url("/"), "POST", std::string(100, 'x'), {}, 2000ms);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->status, 413);
  EXPECT_NE(r->body.find("over the limit of 10 bytes"), std::string::npos);
}

TEST_F(ServerTest, HeadersOverTheLimitAre431) {
  ServerOptions o;
  o.max_header_bytes = 1024;
  start(o, echo());
  auto r = Client::fetch(url("/"), "GET", "", {{"x-big", std::string(4000, 'a')}}, 2000ms);
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->status, 431);
}

TEST_F(ServerTest, SlowBodyIs408AndMalformedIs400) {
  ServerOptions o;
  o.body_timeout_s = 0.3;
  start(o, echo());
  const std::string slow = raw(port_, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"mo");
  EXPECT_TRUE(slow.starts_with("HTTP/1.1 408")) << slow;
  const std::string bad = raw(port_, "HELLO\r\n\r\n");
  EXPECT_TRUE(bad.starts_with("HTTP/1.1 400")) << bad;
}

TEST_F(ServerTest, ErrorBodiesComeFromTheOwnersFormatter) {
  ServerOptions o;
  o.max_body_bytes = 1;
  o.error_body = [](int status, std::string_view message, std::string_view code) {
    return std::to_string(status) + "|" + std::string(code) + "|" + std::string(message);
  };
  start(o, echo());
  auto r = Client::fetch(url("/"), "POST", "xyz", {}, 2000ms);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->body, "413|request_too_large|the request body is over the limit of 1 bytes");
}

Handler streamer(int events) {
  return [events](Request&, Responder& res) -> asio::awaitable<void> {
    if (!co_await res.begin_stream(200, "text/event-stream")) co_return;
    for (int i = 0; i < events; ++i) {
      const std::string event = "data: " + std::to_string(i) + "\n\n";
      if (!co_await res.write(event)) co_return;
    }
    co_await res.end_stream();
  };
}

TEST_F(ServerTest, StreamsChunkedToHttp11AndCloseDelimitedToHttp10) {
  start({}, streamer(3));
  const std::string v11 = raw(port_, "GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_NE(v11.find("Transfer-Encoding: chunked"), std::string::npos) << v11;
  const std::string v10 = raw(port_, "GET / HTTP/1.0\r\n\r\n");
  EXPECT_TRUE(v10.starts_with("HTTP/1.0 200")) << v10;
  EXPECT_EQ(v10.find("chunked"), std::string::npos) << v10;
  EXPECT_NE(v10.find("\r\n\r\ndata: 0\n\ndata: 1\n\ndata: 2\n\n"), std::string::npos) << v10;
}

// Relaying is a property, not a timing target: the handler writes event i+1 only after the
// client has received event i, so the test can only pass if each write reaches the client
// on its own.
TEST_F(ServerTest, EachStreamedWriteReachesTheClientBeforeTheNext) {
  auto received = std::make_shared<std::atomic<int>>(-1);
  start({}, [received](Request&, Responder& res) -> asio::awaitable<void> {
    co_await res.begin_stream(200, "text/event-stream");
    asio::steady_timer t(co_await asio::this_coro::executor);
    for (int i = 0; i < 5; ++i) {
      const std::string event = "data: " + std::to_string(i) + "\n\n";
      co_await res.write(event);
      for (int spins = 0; received->load() < i && spins < 500; ++spins) {
        t.expires_after(10ms);
        co_await t.async_wait(asio::use_awaitable);
      }
    }
    co_await res.end_stream();
  });
  asio::io_context io;
  Client client;
  int seen = 0;
  bool in_order = true;
  asio::co_spawn(io, [&]() -> asio::awaitable<void> {
    ClientRequest req{"GET", "/", {}, ""};  // named: GCC 12 destroys braced co_await temporaries twice
    auto ex = co_await client.open("127.0.0.1", std::to_string(port_), std::move(req), Timeouts{});
    if (!ex.ok()) co_return;
    std::string got;
    for (;;) {
      auto piece = co_await (*ex)->read_some();
      if (!piece.ok() || (piece->empty() && (*ex)->done())) break;
      got.append(*piece);
      while (got.find("\n\n") != std::string::npos) {
        got.erase(0, got.find("\n\n") + 2);
        in_order = in_order && received->load() == seen - 1;
        received->store(seen++);
      }
    }
  }, asio::detached);
  io.run();
  EXPECT_EQ(seen, 5);
  EXPECT_TRUE(in_order);
}

TEST_F(ServerTest, DisconnectWatchFiresWhenTheClientLeaves) {
  auto gone = std::make_shared<std::promise<void>>();
  auto fired = std::make_shared<std::atomic<bool>>(false);
  start({}, [gone, fired](Request&, Responder& res) -> asio::awaitable<void> {
    res.watch_disconnect([gone, fired] {
      fired->store(true);
      gone->set_value();
    });
    asio::steady_timer t(co_await asio::this_coro::executor);
    for (int i = 0; i < 300 && !fired->load(); ++i) {
      t.expires_after(10ms);
      co_await t.async_wait(asio::use_awaitable);
    }
    co_await res.send(200, "late", "text/plain");
  });
  {
    asio::io_context io;
    tcp::socket s(io);
    s.connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)});
    asio::write(s, asio::buffer(std::string("GET / HTTP/1.1\r\nHost: x\r\n\r\n")));
    std::this_thread::sleep_for(50ms);
  }  // closes the socket
  EXPECT_EQ(gone->get_future().wait_for(3s), std::future_status::ready);
}

// A flood of idle connections cannot lock out a real client: beyond the cap the oldest
// idle connection is closed to make room.
TEST_F(ServerTest, IdleConnectionsBeyondTheCapAreShedOldestFirst) {
  ServerOptions o;
  o.max_connections = 8;
  start(o, echo());
  asio::io_context io;
  std::vector<tcp::socket> idle;
  for (int i = 0; i < 40; ++i) {
    idle.emplace_back(io);
    idle.back().connect({asio::ip::make_address("127.0.0.1"), static_cast<uint16_t>(port_)});
  }
  for (int i = 0; i < 3; ++i) {
    auto r = Client::fetch(url("/health"), "GET", "", {}, 2000ms);
    ASSERT_TRUE(r.ok()) << r.status().message();
    EXPECT_EQ(r->status, 200);
  }
  for (int i = 0; i < 100 && server_->open_connections() > 8; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_LE(server_->open_connections(), 8);
  // The first idle connections were the ones closed.
  idle[0].non_blocking(true);
  char c;
  boost::system::error_code ec;
  for (int i = 0; i < 100; ++i) {
    idle[0].read_some(asio::buffer(&c, 1), ec);
    if (ec != asio::error::would_block) break;
    std::this_thread::sleep_for(10ms);
  }
  EXPECT_EQ(ec, asio::error::eof);
}

TEST_F(ServerTest, ListenRefusesAPortOutOfRange) {
  ServerOptions o;
  o.port = 70000;
  Server s(o, echo());
  auto r = s.listen();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("port 70000 is out of range"), std::string::npos);
}

}  // namespace
}  // namespace koi::net
