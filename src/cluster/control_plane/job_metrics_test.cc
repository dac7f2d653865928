#include "cluster/control_plane/job_metrics.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>
#include <string>

namespace koi::cluster {
namespace {

namespace json = boost::json;

std::string jsonl_of_steps(int n) {
  std::string out;
  for (int step = 1; step <= n; ++step) out += "{\"step\":" + std::to_string(step) + ",\"loss\":" + std::to_string(step) + "}\n";
  return out;
}

std::vector<int64_t> steps_of(const json::value& series) {
  std::vector<int64_t> out;
  for (const json::value& p : series.as_array()) out.push_back(p.as_array()[0].to_number<int64_t>());
  return out;
}

TEST(JobMetricsTest, SeriesPerFieldInStepOrderALaterLineWins) {
  // A resumed run writes steps 2 and 3 again; the validation loss has its own steps; the
  // torn last line of a trainer mid-write is skipped.
  const std::string text =
      "{\"step\":1,\"loss\":4.0,\"lr\":0.1}\n{\"step\":2,\"loss\":3.0}\n{\"step\":3,\"loss\":2.5}\n"
      "{\"step\":2,\"loss\":3.5}\n{\"step\":3,\"loss\":2.0,\"val_loss\":2.2}\n{\"step\":4,\"lo";
  const json::object s = metric_series_from_jsonl(text, 100);
  EXPECT_EQ(json::serialize(s.at("loss")), "[[1,4E0],[2,3.5E0],[3,2E0]]");
  EXPECT_EQ(json::serialize(s.at("val_loss")), "[[3,2.2E0]]");
  EXPECT_EQ(json::serialize(s.at("lr")), "[[1,1E-1]]");
  EXPECT_FALSE(s.contains("step"));
}

TEST(JobMetricsTest, ThinnedToEveryPowerOfTwoPointAndTheLast) {
  // 10 points fit in 10: all of them.
  EXPECT_EQ(metric_series_from_jsonl(jsonl_of_steps(10), 11).at("loss").as_array().size(), 10u);
  // 10 points in at most 5: every 4th (steps 1, 5, 9) and the last (10).
  EXPECT_EQ(steps_of(metric_series_from_jsonl(jsonl_of_steps(10), 5).at("loss")), (std::vector<int64_t>{1, 5, 9, 10}));
  // 1000 points in at most 100: every 16th (63 points) and the last.
  const std::vector<int64_t> thin = steps_of(metric_series_from_jsonl(jsonl_of_steps(1000), 100).at("loss"));
  ASSERT_EQ(thin.size(), 64u);
  EXPECT_EQ(thin[1], 17);
  EXPECT_EQ(thin.back(), 1000);
}

}  // namespace
}  // namespace koi::cluster
