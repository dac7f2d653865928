#include "net/metrics_server.h"

#include <gtest/gtest.h>

#include <chrono>

#include "net/client.h"

namespace koi::net {
namespace {

TEST(MetricsServer, ServesTheRegistryLiveAndRefusesOtherPaths) {
  metrics::Registry registry;
  metrics::Gauge& g = registry.gauge("koi_test_value", "A test gauge.").labels({});
  auto server = MetricsServer::start(registry, "127.0.0.1", 0);
  ASSERT_TRUE(server.ok()) << server.status().to_string();
  const std::string base = "http://127.0.0.1:" + std::to_string((*server)->port());
  const auto timeout = std::chrono::seconds(5);
  g.set(3);
  auto r = Client::fetch(base + "/metrics", "GET", "", {}, timeout);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, registry.render());
  EXPECT_NE(r->body.find("koi_test_value 3\n"), std::string::npos);
  g.set(4);  // the next scrape sees the new value
  r = Client::fetch(base + "/metrics", "GET", "", {}, timeout);
  EXPECT_NE(r->body.find("koi_test_value 4\n"), std::string::npos);
  r = Client::fetch(base + "/health", "GET", "", {}, timeout);
  EXPECT_EQ(r->status, 200);
  r = Client::fetch(base + "/other", "GET", "", {}, timeout);
  EXPECT_EQ(r->status, 404);
  r = Client::fetch(base + "/metrics", "POST", "x", {}, timeout);
  EXPECT_EQ(r->status, 405);
}

TEST(MetricsServer, PortInUseIsAClearError) {
  metrics::Registry registry;
  auto first = MetricsServer::start(registry, "127.0.0.1", 0);
  ASSERT_TRUE(first.ok());
  auto second = MetricsServer::start(registry, "127.0.0.1", (*first)->port());
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("metrics server on 127.0.0.1:"), std::string::npos)
      << second.status().message();
}

}  // namespace
}  // namespace koi::net
