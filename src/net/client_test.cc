#include "net/client.h"

#include <gtest/gtest.h>

#include <boost/asio.hpp>
#include <thread>

namespace koi::net {
namespace {

namespace asio = boost::asio;
using namespace std::chrono_literals;

TEST(Url, ParsesAndRefusesWhatIsNotHttpHostPort) {
  auto u = parse_url("http://localhost:8000/v1/models?x=1");
  ASSERT_TRUE(u.ok());
  EXPECT_EQ(u->host, "localhost");
  EXPECT_EQ(u->port, "8000");
  EXPECT_EQ(u->target, "/v1/models?x=1");
  EXPECT_EQ(parse_url("http://h")->target, "/");
  EXPECT_EQ(parse_url("http://h")->port, "80");
  EXPECT_FALSE(parse_url("https://h:1/").ok());
  EXPECT_FALSE(parse_url("h:1").ok());
  EXPECT_FALSE(parse_url("http://h:99999/").ok());
  EXPECT_EQ(resolve_host("localhost"), "127.0.0.1");
}

// A server whose handler records each connection it sees by the peer's port.
class ClientTest : public ::testing::Test {
 protected:
  void start(double idle_timeout_s = 60) {
    ServerOptions o;
    o.idle_timeout_s = idle_timeout_s;
    server_ = std::make_unique<Server>(o, [this](Request& req, Responder& res) -> asio::awaitable<void> {
      ++requests_;
      std::string body = req.body().empty() ? "ok" : req.body();  // named: see client.h on GCC 12
      co_await res.send(200, std::move(body), "text/plain");
    });
    port_ = std::to_string(*server_->listen());
    server_->start();
  }
  // Runs `n` sequential calls on io_ (one worker), returns the bodies.
  std::vector<std::string> calls(Client& client, int n, std::chrono::milliseconds pause = 0ms) {
    asio::io_context& io = io_;
    io.restart();
    std::vector<std::string> out;
    asio::co_spawn(io, [&]() -> asio::awaitable<void> {
      asio::steady_timer t(io);
      for (int i = 0; i < n; ++i) {
        // Named, not braced temporaries: GCC 12 destroys braced temporaries of a co_await twice.
        ClientRequest req{"POST", "/", {}, "b" + std::to_string(i)};
        auto r = co_await client.call("127.0.0.1", port_, std::move(req), Timeouts{});
        out.push_back(r.ok() ? r->body : "error: " + r.status().message());
        t.expires_after(pause);
        co_await t.async_wait(asio::use_awaitable);
      }
    }, asio::detached);
    io.run();
    return out;
  }
  asio::io_context io_;  // outlives the test body's Client, whose pooled sockets belong to it
  std::unique_ptr<Server> server_;
  std::string port_;
  std::atomic<int> requests_{0};
};

TEST_F(ClientTest, ReusesOneKeepAliveConnection) {
  start();
  Client client;
  EXPECT_EQ(calls(client, 5), (std::vector<std::string>{"b0", "b1", "b2", "b3", "b4"}));
  EXPECT_EQ(client.idle_connections(), 1u);
  EXPECT_EQ(server_->open_connections(), 1);
}

TEST_F(ClientTest, ReplacesAPooledConnectionTheServerClosed) {
  start(/*idle_timeout_s=*/0.05);
  Client client;
  EXPECT_EQ(calls(client, 3, 200ms), (std::vector<std::string>{"b0", "b1", "b2"}));
  EXPECT_EQ(requests_.load(), 3);
}

TEST(ClientErrors, RefusedAndSilentUpstreamsAreStatuses) {
  // A port nothing listens on.
  asio::io_context io;
  asio::ip::tcp::acceptor a(io, {asio::ip::make_address("127.0.0.1"), 0});
  const int port = a.local_endpoint().port();
  a.close();
  auto refused = Client::fetch("http://127.0.0.1:" + std::to_string(port) + "/", "GET", "", {}, 1000ms);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kUnavailable);
  // A listener that never answers.
  asio::ip::tcp::acceptor silent(io, {asio::ip::make_address("127.0.0.1"), 0});
  auto timed_out = Client::fetch("http://127.0.0.1:" + std::to_string(silent.local_endpoint().port()) + "/", "GET", "", {}, 200ms);
  ASSERT_FALSE(timed_out.ok());
  EXPECT_EQ(timed_out.status().code(), StatusCode::kDeadlineExceeded);
}

}  // namespace
}  // namespace koi::net
