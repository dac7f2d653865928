#include "base/status.h"

#include <gtest/gtest.h>

namespace koi {
namespace {

Result<int> parse_positive(int x) {
  if (x <= 0) return Status::invalid_argument("expected a positive number, got " + std::to_string(x));
  return x;
}

Result<int> twice(int x) {
  KOI_ASSIGN_OR_RETURN(int v, parse_positive(x));
  return 2 * v;
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(ok_status().ok());
  Status s = Status::corrupt("bad magic");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.to_string(), "corrupt: bad magic");
  EXPECT_EQ(s.with_prefix("model.gguf").message(), "model.gguf: bad magic");
}

TEST(StatusTest, QuoteKeepsMessagesOnOneLine) {
  EXPECT_EQ(quote("blk.0.attn_q.weight"), "'blk.0.attn_q.weight'");
  EXPECT_EQ(quote(std::string_view("a\nb\0c\x7f", 6)), "'a\\x0ab\\x00c\\x7f'");
  EXPECT_EQ(quote(std::string(120, 'x')), "'" + std::string(100, 'x') + "...'");
}

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*twice(4), 8);
  Result<int> r = twice(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "expected a positive number, got -1");
}

}  // namespace
}  // namespace koi
