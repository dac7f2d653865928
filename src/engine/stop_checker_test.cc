#include "engine/stop_checker.h"

#include <gtest/gtest.h>

namespace koi::engine {
namespace {

TEST(StopCheckerTest, NoStopStringsPassesEverythingThrough) {
  StopChecker c({});
  EXPECT_EQ(c.push("hello"), "hello");
  EXPECT_EQ(c.push(" world"), " world");
  EXPECT_EQ(c.finish(), "");
  EXPECT_FALSE(c.stopped());
}

TEST(StopCheckerTest, StopInsideOnePieceDropsItAndTheRest) {
  StopChecker c({"END"});
  EXPECT_EQ(c.push("abcENDxyz"), "abc");
  EXPECT_TRUE(c.stopped());
  EXPECT_EQ(c.push("more"), "");
  EXPECT_EQ(c.finish(), "");
}

TEST(StopCheckerTest, StopSplitOverManyPiecesNeverLeaks) {
  StopChecker c({"</s>"});
  EXPECT_EQ(c.push("Hi <"), "Hi ");
  EXPECT_EQ(c.push("/"), "");
  EXPECT_EQ(c.push("s"), "");
  EXPECT_EQ(c.push(">tail"), "");
  EXPECT_TRUE(c.stopped());
}

TEST(StopCheckerTest, HeldTextIsReleasedWhenItStopsMatching) {
  StopChecker c({"</s>"});
  EXPECT_EQ(c.push("a</"), "a");
  EXPECT_EQ(c.push("b"), "</b");
  EXPECT_FALSE(c.stopped());
  EXPECT_EQ(c.push("<"), "");
  EXPECT_EQ(c.finish(), "<");
}

TEST(StopCheckerTest, OverlappingPrefixesHoldTheLongestPossibleStart) {
  // "aab": after "aa" both "aa"-tail and "a"-tail could start it; the longest is held.
  StopChecker c({"aab"});
  EXPECT_EQ(c.push("xa"), "x");
  EXPECT_EQ(c.push("a"), "");
  EXPECT_EQ(c.push("a"), "a");  // "aaa": only the last "aa" can still become "aab"
  EXPECT_EQ(c.push("b!"), "");
  EXPECT_TRUE(c.stopped());
}

TEST(StopCheckerTest, EarliestOfSeveralStopStringsWins) {
  StopChecker c({"world", "lo w"});
  EXPECT_EQ(c.push("he"), "he");
  EXPECT_EQ(c.push("llo"), "l");  // "lo" may start "lo w"
  EXPECT_EQ(c.push(" world"), "");  // "lo w" starts before "world"
  EXPECT_TRUE(c.stopped());
}

TEST(StopCheckerTest, StopSplitAcrossCharacterPiecesOfMultibyteText) {
  StopChecker c({"éé"});
  EXPECT_EQ(c.push("caf"), "caf");
  EXPECT_EQ(c.push("é"), "");
  EXPECT_EQ(c.push("é"), "");
  EXPECT_TRUE(c.stopped());
}

}  // namespace
}  // namespace koi::engine
