#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace koi::serve {
namespace {

TEST(MetricsTest, RendersCountersGaugesAndCumulativeHistograms) {
  MetricsRegistry r;
  r.counter("koi:tokens", "Tokens.", "m=\"a\"").inc(3);
  r.gauge("koi:running", "Running.", "").set(2);
  Histogram& h = r.histogram("koi:latency_seconds", "Latency.", "m=\"a\"", {0.1, 1.0});
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
  MetricsRegistry r;
  r.counter("c", "h", "").inc();
  r.counter("c", "h", "").inc();
  EXPECT_EQ(r.counter("c", "h", "").value(), 2.0);
}

TEST(MetricsTest, ServeMetricsUseVllmNamesWithKoiPrefix) {
  ServeMetrics m("my \"model\"");
  const std::string text = m.registry.render();
  for (const char* name : {"koi:num_requests_running{", "koi:num_requests_waiting{", "koi:kv_cache_usage_perc{",
                           "koi:prefix_cache_hits_total{", "koi:num_preemptions_total{",
                           "koi:spec_decode_num_draft_tokens_total{", "koi:spec_decode_num_accepted_tokens_total{", "koi:prompt_tokens_total{",
                           "koi:generation_tokens_total{", "koi:time_to_first_token_seconds_bucket{",
                           "koi:inter_token_latency_seconds_bucket{", "koi:e2e_request_latency_seconds_bucket{",
                           "koi:request_queue_time_seconds_bucket{", "model_name=\"my \\\"model\\\"\""}) {
    EXPECT_NE(text.find(name), std::string::npos) << name;
  }
}

}  // namespace
}  // namespace koi::serve
