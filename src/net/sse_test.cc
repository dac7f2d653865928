#include "net/sse.h"

#include <gtest/gtest.h>

namespace koi::net {
namespace {

TEST(Sse, SplitterHandsOverEachCompleteEventAndKeepsTheTail) {
  SseSplitter s;
  EXPECT_TRUE(s.feed("data: {\"a\":").empty());
  auto events = s.feed("1}\n\ndata: [DONE]\n\nda");
  ASSERT_EQ(events.size(), 2u);
  EXPECT_EQ(events[0].data, "{\"a\":1}");
  EXPECT_EQ(events[0].raw, "data: {\"a\":1}\n\n");
  EXPECT_EQ(events[1].data, "[DONE]");
  EXPECT_EQ(s.pending(), "da");
}

TEST(Sse, SplitterJoinsDataLinesAndIgnoresComments) {
  SseSplitter s;
  auto events = s.feed(": keep-alive\r\ndata:x\r\ndata: y\n\n");
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "xy");
}

TEST(Sse, DataFormatsOneEvent) {
  EXPECT_EQ(sse_data("[DONE]"), "data: [DONE]\n\n");
  SseSplitter s;
  auto events = s.feed(sse_data("{\"k\":1}"));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].data, "{\"k\":1}");
}

}  // namespace
}  // namespace koi::net
