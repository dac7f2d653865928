#include "cluster/control_plane/serve_probe.h"

#include <gtest/gtest.h>

#include <cmath>

namespace koi::cluster {
namespace {

// As koi serve renders it (src/serve/metrics.cc), trimmed.
constexpr const char* kText = R"(# HELP koi:num_requests_running Requests in the engine's running batch.
# TYPE koi:num_requests_running gauge
koi:num_requests_running{model_name="fortunes"} 1
koi:num_requests_waiting{model_name="fortunes"} 3
koi:kv_cache_usage_perc{model_name="fortunes"} 0.25
koi:time_to_first_token_seconds_bucket{model_name="fortunes",le="0.01"} 2
koi:time_to_first_token_seconds_bucket{model_name="fortunes",le="0.1"} 8
koi:time_to_first_token_seconds_bucket{model_name="fortunes",le="+Inf"} 10
koi:time_to_first_token_seconds_sum{model_name="fortunes"} 0.9
koi:time_to_first_token_seconds_count{model_name="fortunes"} 10
koi:e2e_request_latency_seconds_bucket{model_name="fortunes",le="0.5"} 3
koi:e2e_request_latency_seconds_bucket{model_name="fortunes",le="+Inf"} 9
koi:e2e_request_latency_seconds_count{model_name="fortunes"} 9
koi:inter_token_latency_seconds_bucket{model_name="fortunes",le="0.01"} 40
koi:inter_token_latency_seconds_bucket{model_name="fortunes",le="+Inf"} 50
koi:inter_token_latency_seconds_count{model_name="fortunes"} 50
koi:generation_tokens_total{model_name="fortunes"} 60
koi:request_success_total{model_name="fortunes",finished_reason="abort"} 4
koi:request_success_total{model_name="fortunes",finished_reason="length"} 7
koi:request_success_total{model_name="fortunes",finished_reason="stop"} 2
koi:http_responses_total{model_name="fortunes",status="200"} 30
koi:http_responses_total{model_name="fortunes",status="400"} 5
koi:http_responses_total{model_name="fortunes",status="429"} 6
koi:http_responses_total{model_name="fortunes",status="503"} 1
)";

TEST(ServeProbeTest, ReadsTheSeriesOfKoiServe) {
  const ServeSample s = parse_serve_metrics(kText);
  EXPECT_EQ(s.running, 1);
  EXPECT_EQ(s.waiting, 3);
  EXPECT_EQ(s.kv_usage, 0.25);
  EXPECT_EQ(s.finished, 9);  // stop + length, not abort
  EXPECT_EQ(s.errors, 6);    // 400 and 503, not 429
  EXPECT_EQ(s.ttft_count, 10);
  ASSERT_EQ(s.ttft_buckets.size(), 3u);
  EXPECT_EQ(s.ttft_buckets.at(0.1), 8);
  EXPECT_TRUE(std::isinf(s.ttft_buckets.rbegin()->first));
  EXPECT_EQ(s.e2e_count, 9);
  ASSERT_EQ(s.e2e_buckets.size(), 2u);
  EXPECT_EQ(s.e2e_buckets.at(0.5), 3);
  EXPECT_EQ(s.itl_count, 50);
  EXPECT_EQ(s.itl_buckets.at(0.01), 40);
  EXPECT_EQ(s.generation_tokens, 60);
}

TEST(ServeProbeTest, DeltasAndQuantiles) {
  ServeSample a = parse_serve_metrics(kText), b = a;
  b.errors += 2, b.finished += 10, b.ttft_count += 4, b.waiting = 0;
  b.ttft_buckets[0.01] += 1, b.ttft_buckets[0.1] += 4, b.ttft_buckets[INFINITY] += 4;
  const ServeSample d = sample_delta(a, b);
  EXPECT_EQ(d.errors, 2);
  EXPECT_EQ(d.finished, 10);
  EXPECT_EQ(d.waiting, 0);  // gauges are the later sample's
  EXPECT_EQ(d.ttft_buckets.at(0.1), 4);
  b.e2e_count += 2, b.e2e_buckets[0.5] += 2, b.e2e_buckets[INFINITY] += 2;
  b.itl_count += 7, b.itl_buckets[0.01] += 5, b.itl_buckets[INFINITY] += 7, b.generation_tokens += 9;
  const ServeSample e = sample_delta(a, b);
  EXPECT_EQ(e.e2e_count, 2);
  EXPECT_EQ(e.e2e_buckets.at(0.5), 2);
  EXPECT_EQ(e.itl_count, 7);
  EXPECT_EQ(e.itl_buckets.at(0.01), 5);
  EXPECT_EQ(e.generation_tokens, 9);
  // 4 observations: 1 <= 10 ms, 3 in (10, 100] ms. The median (rank 2) is a third of the way
  // into the second bucket; the p99 (rank 3.96) near its top; none beyond it.
  EXPECT_NEAR(histogram_quantile(d.ttft_buckets, 0.5), 0.01 + 0.09 / 3, 1e-12);
  EXPECT_NEAR(histogram_quantile(d.ttft_buckets, 0.99), 0.01 + 0.09 * 2.96 / 3, 1e-12);
  EXPECT_EQ(histogram_quantile({}, 0.99), 0);
  // Observations beyond the largest finite bound answer that bound (as Prometheus does).
  EXPECT_EQ(histogram_quantile({{0.1, 1}, {INFINITY, 5}}, 0.99), 0.1);
}

}  // namespace
}  // namespace koi::cluster
