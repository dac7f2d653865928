// The control plane's pace diagnoses from metrics.jsonl: exact at toy scale.
#include "cluster/control_plane/train_pace.h"

#include <gtest/gtest.h>

#include <fmt/format.h>

#include <fstream>

#include "base/file.h"

namespace koi::cluster {
namespace {

// n steps from `first`, step_ms `ms`, and with ranks, rank 1 at `rank1_ms` (the others at ms).
std::string lines(int64_t first, int n, double ms, int ranks = 1, double rank1_ms = 0) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += fmt::format("{{\"step\":{},\"loss\":2.5,\"step_ms\":{:.3f}", first + i, ms);
    if (ranks > 1) {
      out += ",\"rank_ms\":[";
      for (int r = 0; r < ranks; ++r) out += fmt::format("{}{:.3f}", r ? "," : "", r == 1 ? rank1_ms : ms);
      out += "]";
    }
    out += "}\n";
  }
  return out;
}

TEST(TrainPace, ParsesStepRecordsAndSkipsTheRest) {
  const std::string text = "p\":1,\"step_ms\":3}\n" + lines(1, 2, 10.0, 2, 30.0) +
                           "{\"eval\":true,\"step\":2,\"val_loss\":2.4}\n{\"step\":3,\"step_";
  const std::vector<StepPace> steps = parse_pace(text);
  ASSERT_EQ(steps.size(), 2u);
  EXPECT_EQ(steps[1].step, 2);
  EXPECT_DOUBLE_EQ(steps[1].step_ms, 10.0);
  EXPECT_EQ(steps[1].rank_ms, (std::vector<double>{10.0, 30.0}));
}

TEST(TrainPace, ARankSlowForTheWholeWindowIsAStraggler) {
  auto steps = parse_pace(lines(1, 10, 10.0, 3) + lines(11, 5, 10.0, 3, 40.0));
  std::optional<Straggler> s = find_straggler(steps);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->rank, 1);
  EXPECT_DOUBLE_EQ(s->rank_ms, 40.0);
  EXPECT_DOUBLE_EQ(s->median_ms, 10.0);
  EXPECT_EQ(s->first_step, 11);
  EXPECT_EQ(s->last_step, 15);
  EXPECT_EQ(s->message(),
            "rank 1 is a straggler: 40.0 ms of compute per step over steps 11-15, 4.0x the median of the ranks (10.0 ms)");
  // Four slow steps of five, or a slowdown under 1.5x, or one rank: none.
  EXPECT_FALSE(find_straggler(parse_pace(lines(1, 10, 10.0, 3) + lines(11, 4, 10.0, 3, 40.0) + lines(15, 1, 10.0, 3))));
  EXPECT_FALSE(find_straggler(parse_pace(lines(1, 10, 10.0, 3, 14.9))));
  EXPECT_FALSE(find_straggler(parse_pace(lines(1, 10, 10.0))));
}

TEST(TrainPace, AWindowFarSlowerThanTheJobsOwnHistoryIsASlowdown) {
  std::optional<Slowdown> s = find_slowdown(parse_pace(lines(1, 20, 10.0) + lines(21, 5, 75.0)));
  ASSERT_TRUE(s.has_value());
  EXPECT_DOUBLE_EQ(s->recent_ms, 75.0);
  EXPECT_DOUBLE_EQ(s->usual_ms, 10.0);
  EXPECT_EQ(s->history, 20);
  EXPECT_EQ(s->first_step, 21);
  EXPECT_EQ(s->last_step, 25);
  EXPECT_EQ(s->message().substr(0, 62), "steps 21-25 took 75.0 ms each (median), 7.5x the job's own 10.")
      << s->message();
  EXPECT_FALSE(find_slowdown(parse_pace(lines(1, 20, 10.0) + lines(21, 5, 29.0))));  // 2.9x: not slow enough
  EXPECT_FALSE(find_slowdown(parse_pace(lines(1, 20, 2.0) + lines(21, 5, 40.0))));   // 20x but 38 ms: noise
  EXPECT_FALSE(find_slowdown(parse_pace(lines(1, 9, 10.0) + lines(10, 5, 45.0))));   // 9 steps: too little history
}

TEST(TrainPace, MedianOfEvenAndOddCounts) {
  EXPECT_DOUBLE_EQ(median({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median({5, 1, 3}), 3);
  EXPECT_DOUBLE_EQ(median({}), 0);
}

}  // namespace
}  // namespace koi::cluster

namespace koi::cluster {
namespace {

void append(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::app | std::ios::binary) << text;
}

// Only the bytes appended since the last update are read; a partial line waits for its end; a
// new (shorter) file starts over; a large file is read from its last kPaceTailBytes.
TEST(TrainPace, FollowerReadsOnlyWhatWasAppended) {
  auto dir = make_temp_dir("koi-pace-test");
  ASSERT_TRUE(dir.ok());
  const std::string path = path_join(*dir, "metrics.jsonl");
  PaceFollower f;
  EXPECT_TRUE(f.update(path).empty());  // no file yet
  append(path, lines(1, 3, 10.0));
  ASSERT_EQ(f.update(path).size(), 3u);
  const int64_t consumed = f.offset();
  append(path, lines(4, 1, 20.0) + "{\"step\":5,\"step_");  // a step and half of the next
  const std::vector<StepPace>& steps = f.update(path);
  ASSERT_EQ(steps.size(), 4u);
  EXPECT_EQ(steps.back().step, 4);
  EXPECT_GT(f.offset(), consumed);
  append(path, "ms\":30.000}\n");
  ASSERT_EQ(f.update(path).size(), 5u);
  EXPECT_EQ(f.update(path).back().step, 5);
  EXPECT_DOUBLE_EQ(f.update(path).back().step_ms, 30.0);
  EXPECT_EQ(f.update(path).size(), 5u);  // nothing new

  ASSERT_TRUE(write_file_atomic(path, lines(1, 2, 7.0)).ok());  // a new run's shorter file
  ASSERT_EQ(f.update(path).size(), 2u);
  EXPECT_DOUBLE_EQ(f.update(path).back().step_ms, 7.0);

  const std::string big = lines(1, 2000, 5.0);  // far beyond the tail read at first
  ASSERT_TRUE(write_file_atomic(path, big).ok());
  PaceFollower fresh;
  const std::vector<StepPace>& kept = fresh.update(path);
  EXPECT_EQ(kept.size(), kPaceKeepSteps);
  EXPECT_EQ(kept.back().step, 2000);
  EXPECT_EQ(fresh.offset(), static_cast<int64_t>(big.size()));
  remove_all(*dir);
}

}  // namespace
}  // namespace koi::cluster

namespace koi::cluster {
namespace {

// ranks_even clears a Straggler only when no rank is above the ratio in any step of the
// window: a rank above it in some steps is neither a straggler nor even.
TEST(TrainPace, RanksEvenNeedsEveryStepOfTheWindow) {
  EXPECT_TRUE(ranks_even(parse_pace(lines(1, 20, 10.0, 2, 30.0) + lines(21, 5, 10.0, 2, 14.0))));
  const std::vector<StepPace> mixed = parse_pace(lines(1, 3, 10.0, 2, 10.0) + lines(4, 2, 10.0, 2, 40.0));
  EXPECT_FALSE(ranks_even(mixed));
  EXPECT_FALSE(find_straggler(mixed).has_value());
  EXPECT_FALSE(ranks_even(parse_pace(lines(1, 4, 10.0, 2, 10.0))));  // fewer steps than the window
  EXPECT_FALSE(ranks_even(parse_pace(lines(1, 5, 10.0))));            // one rank: nothing to compare
}

}  // namespace
}  // namespace koi::cluster

namespace koi::cluster {
namespace {

// A slow job recovers against the usual time found at its diagnosis, not against a history
// that has filled with the slow steps.
TEST(TrainPace, RecoveredPaceIsJudgedAgainstTheUsualTimeAtTheDiagnosis) {
  const std::optional<Slowdown> slow = find_slowdown(parse_pace(lines(1, 20, 100.0) + lines(21, 5, 400.0)));
  ASSERT_TRUE(slow.has_value());
  EXPECT_DOUBLE_EQ(slow->usual_ms, 100.0);
  const std::string after = lines(1, 20, 100.0) + lines(21, 60, 400.0);  // the slow steps are now most of it
  EXPECT_FALSE(recovered_pace(parse_pace(after), slow->usual_ms).has_value());
  EXPECT_DOUBLE_EQ(*recovered_pace(parse_pace(after + lines(81, 5, 140.0)), slow->usual_ms), 140.0);  // 1.4x
  EXPECT_FALSE(recovered_pace(parse_pace(after + lines(81, 5, 180.0)), slow->usual_ms).has_value());  // 1.8x, +80 ms
  // Millisecond steps: within kSlowMinExtraMs / 2 of the usual time is back, whatever the ratio.
  EXPECT_TRUE(recovered_pace(parse_pace(lines(1, 5, 20.0)), 2.0).has_value());
  EXPECT_FALSE(recovered_pace(parse_pace(lines(1, 5, 20.0)), 0.0).has_value());  // no usual time known
}

}  // namespace
}  // namespace koi::cluster
