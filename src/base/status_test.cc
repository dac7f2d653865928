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

TEST(StatusTest, ResultPropagates) {
  EXPECT_EQ(*twice(4), 8);
  Result<int> r = twice(-1);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(r.status().message(), "expected a positive number, got -1");
}

}  // namespace
}  // namespace koi
