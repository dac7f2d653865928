// The load generator's choice of model when none is given.
#include "serve/load_gen.h"

#include <gtest/gtest.h>

namespace koi::serve {
namespace {

TEST(LoadGen, BenchServeSendsTheServersOnlyModelWhenNoneIsGiven) {
  const std::string url = "http://127.0.0.1:8000";
  auto one = only_served_model(R"({"object":"list","data":[{"id":"stories","object":"model"}]})", url);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(*one, "stories");
  EXPECT_EQ(only_served_model(R"({"data":[{"id":"a"},{"id":"b"}]})", url).status().message(),
            "http://127.0.0.1:8000 serves 2 models (a, b); pick one with --model");
  EXPECT_EQ(only_served_model(R"({"data":[]})", url).status().message(),
            "http://127.0.0.1:8000 serves no models; start it with a model");
  EXPECT_EQ(only_served_model("<html>", url).status().message(),
            "http://127.0.0.1:8000/v1/models is not an OpenAI model list; pass the model name with --model");
}

}  // namespace
}  // namespace koi::serve
