#include "base/trace.h"

#include <gtest/gtest.h>

#include <thread>

#include "base/clock.h"

namespace koi::trace {
namespace {

TEST(Trace, SpansNestAndRenderAsCompleteEvents) {
  Recorder r(3);
  r.name_track(0, "main \"loop\"");
  {
    Span outer(&r, "outer", "test");
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    Span inner(&r, "inner", "test");
  }
  ASSERT_EQ(r.size(), 2u);
  const std::string json = r.to_json();
  EXPECT_NE(json.find("{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":3,\"tid\":0,\"args\":{\"name\":\"main \\\"loop\\\"\"}}"),
            std::string::npos)
      << json;
  // inner is recorded first (it closes first) and starts at least 2 ms after outer.
  const size_t inner_at = json.find("\"name\":\"inner\""), outer_at = json.find("\"name\":\"outer\"");
  ASSERT_NE(inner_at, std::string::npos);
  ASSERT_NE(outer_at, std::string::npos);
  EXPECT_LT(inner_at, outer_at);
  auto number_after = [&](size_t from, const char* key) {
    const size_t at = json.find(key, from) + std::string(key).size();
    return std::stod(json.substr(at));
  };
  const double inner_ts = number_after(inner_at, "\"ts\":"), outer_ts = number_after(outer_at, "\"ts\":");
  const double inner_dur = number_after(inner_at, "\"dur\":"), outer_dur = number_after(outer_at, "\"dur\":");
  EXPECT_GE(inner_ts - outer_ts, 2000.0);
  EXPECT_LE(inner_ts + inner_dur, outer_ts + outer_dur);
}

TEST(Trace, NullRecorderRecordsNothing) {
  Span span(nullptr, "ignored", "test");  // must not crash
}

TEST(Trace, ArgsAreEmbedded) {
  Recorder r;
  const auto t = Recorder::Clock::now();
  r.record("step", "step", t, t + std::chrono::microseconds(5), 0, "\"step\":7");
  EXPECT_NE(r.to_json().find("\"dur\":5.000,\"args\":{\"step\":7}}"), std::string::npos) << r.to_json();
}

TEST(Trace, AtNsIsTheInstantSystemClockMeasured) {
  const int64_t ns = SystemClock::instance().now_ns();
  const auto t = Recorder::at_ns(ns);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count(), ns);
  Recorder r;
  r.record("span", "test", Recorder::at_ns(ns + 1000), Recorder::at_ns(ns + 3500));
  EXPECT_NE(r.to_json().find("\"dur\":2.500"), std::string::npos) << r.to_json();
}

TEST(Trace, QuoteEscapesAJsonString) { EXPECT_EQ(quote("a\"b\\c\n"), "\"a\\\"b\\\\c\\u000a\""); }

}  // namespace
}  // namespace koi::trace
