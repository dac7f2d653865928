#include "serve/metrics.h"

#include <gtest/gtest.h>

namespace koi::serve {
namespace {

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
