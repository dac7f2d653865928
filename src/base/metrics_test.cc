#include "base/metrics.h"

#include <thread>

#include <gtest/gtest.h>

namespace koi::metrics {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndCumulativeHistograms) {
  Registry r;
  r.counter("koi:tokens", "Tokens.", {"m"}).labels({"a"}).inc(3);
  r.gauge("koi:running", "Running.").labels({}).set(2);
  Histogram& h = r.histogram("koi:latency_seconds", "Latency.", {"m"}, {0.1, 1.0}).labels({"a"});
  h.observe(0.05);
  h.observe(0.5);
  h.observe(5.0);
  EXPECT_EQ(r.render(),
            "# HELP koi:tokens Tokens.\n# TYPE koi:tokens counter\nkoi:tokens_total{m=\"a\"} 3\n"
            "# HELP koi:running Running.\n# TYPE koi:running gauge\nkoi:running 2\n"
            "# HELP koi:latency_seconds Latency.\n# TYPE koi:latency_seconds histogram\n"
            "koi:latency_seconds_bucket{m=\"a\",le=\"0.1\"} 1\n"
            "koi:latency_seconds_bucket{m=\"a\",le=\"1\"} 2\n"
            "koi:latency_seconds_bucket{m=\"a\",le=\"+Inf\"} 3\n"
            "koi:latency_seconds_sum{m=\"a\"} 5.55\n"
            "koi:latency_seconds_count{m=\"a\"} 3\n");
}

TEST(MetricsTest, SameSeriesIsReturnedTwice) {
  Registry r;
  r.counter("c", "h").labels({}).inc();
  r.counter("c", "h").labels({}).inc();
  EXPECT_EQ(&r.counter("c", "h").labels({}), &r.counter("c", "h").labels({}));
  EXPECT_EQ(r.counter("c", "h").labels({}).value(), 2.0);
}

TEST(MetricsTest, AnObservationOnABoundLandsInThatBucket) {
  Registry r;
  Histogram& h = r.histogram("h", "h", {}, {1, 2}).labels({});
  h.observe(1);
  h.observe(2);
  h.observe(2.5);
  EXPECT_EQ(r.render(),
            "# HELP h h\n# TYPE h histogram\n"
            "h_bucket{le=\"1\"} 1\nh_bucket{le=\"2\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 5.5\nh_count 3\n");
  EXPECT_EQ(h.count(), 3u);
  EXPECT_EQ(h.sum(), 5.5);
}

TEST(MetricsTest, LabelValuesAreEscaped) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(render_labels({{"a", "x"}, {"b", "y\"z"}}), "a=\"x\",b=\"y\\\"z\"");
  Registry r;
  r.gauge("g", "G.", {"model"}).labels({"my \"model\"\n"}).set(1);
  EXPECT_EQ(r.render(), "# HELP g G.\n# TYPE g gauge\ng{model=\"my \\\"model\\\"\\n\"} 1\n");
}

TEST(MetricsTest, SeriesRenderInLabelOrderAndFamiliesInDeclarationOrder) {
  Registry r;
  auto requests = r.counter("z_requests", "R.", {"status"});
  r.gauge("a_gauge", "A.");
  requests.labels({"500"}).inc();
  requests.labels({"200"}).inc(2);
  EXPECT_EQ(r.render(),
            "# HELP z_requests R.\n# TYPE z_requests counter\n"
            "z_requests_total{status=\"200\"} 2\nz_requests_total{status=\"500\"} 1\n"
            "# HELP a_gauge A.\n# TYPE a_gauge gauge\n");
}

TEST(MetricsTest, CounterNamedWithTotalKeepsItsName) {
  Registry r;
  r.counter("koi_gateway_auth_failures_total", "Failures.").labels({}).inc();
  EXPECT_EQ(r.render(),
            "# HELP koi_gateway_auth_failures_total Failures.\n# TYPE koi_gateway_auth_failures_total counter\n"
            "koi_gateway_auth_failures_total 1\n");
}

TEST(MetricsTest, ByNameCallsReachTheSameSeries) {
  Registry r;
  Counter& ok = r.counter("requests_total", "R.", {"tenant", "status"}).labels({"acme", "200"});
  r.gauge("outstanding", "O.", {"replica"});
  r.histogram("duration_seconds", "D.", {"replica"}, {0.5});
  r.add("requests_total", {{"tenant", "acme"}, {"status", "200"}});
  r.add("requests_total", {{"tenant", "acme"}, {"status", "200"}}, 2);
  r.set("outstanding", {{"replica", "r1"}}, 4);
  r.observe("duration_seconds", {{"replica", "r1"}}, 0.25);
  r.observe("duration_seconds", {{"replica", "r1"}}, 0.75);
  EXPECT_EQ(ok.value(), 3.0);
  EXPECT_EQ(r.value("requests_total", {{"tenant", "acme"}, {"status", "200"}}), 3.0);
  EXPECT_EQ(r.value("outstanding", {{"replica", "r1"}}), 4.0);
  EXPECT_EQ(r.value("duration_seconds", {{"replica", "r1"}}), 2.0);
  // An absent series reads 0 and is not created.
  EXPECT_EQ(r.value("requests_total", {{"tenant", "other"}, {"status", "200"}}), 0.0);
  EXPECT_EQ(r.render().find("other"), std::string::npos);
}

TEST(MetricsTest, ConcurrentUpdatesAreAllCounted) {
  Registry r;
  Counter& c = r.counter("c", "C.").labels({});
  Histogram& h = r.histogram("h", "H.", {}, {10}).labels({});
  constexpr int kThreads = 4, kPerThread = 10000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) {
        c.inc();
        h.observe(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), kThreads * kPerThread);
  EXPECT_EQ(h.count(), static_cast<uint64_t>(kThreads * kPerThread));
  EXPECT_EQ(h.sum(), kThreads * kPerThread);
}

TEST(MetricsDeathTest, MisuseIsAProgrammerError) {
  Registry r;
  r.counter("c", "C.", {"a"});
  EXPECT_DEATH(r.gauge("c", "C.", {"a"}), "KOI_CHECK failed");
  EXPECT_DEATH(r.counter("c", "C.", {"a"}).labels({"x", "y"}), "KOI_CHECK failed");
  EXPECT_DEATH(r.add("c", {{"b", "x"}}), "KOI_CHECK failed");
  EXPECT_DEATH(r.add("undeclared", {}), "KOI_CHECK failed");
}

}  // namespace
}  // namespace koi::metrics
