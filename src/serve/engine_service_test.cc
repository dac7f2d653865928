#include "serve/engine_service.h"

#include <gtest/gtest.h>

namespace koi::serve {
namespace {

// A model that is never run: these tests only submit, and never start the engine thread,
// so every accepted request stays waiting.
class IdleRunner final : public engine::ModelRunner {
 public:
  int n_vocab() const override { return 16; }
  int max_context() const override { return 64; }
  Status forward(const model::ForwardBatch&, float*) override { return Status::internal("not expected to run"); }
};

std::vector<engine::RequestSpec> requests(int count, const std::string& prefix) {
  std::vector<engine::RequestSpec> out;
  for (int i = 0; i < count; ++i) out.push_back({prefix + std::to_string(i), {1, 2, 3}, {}});
  return out;
}

TEST(EngineServiceTest, RequestThatCanNeverFitIsInvalidAndOneThatCanFitLaterIsRetryable) {
  IdleRunner runner;
  engine::EngineConfig config;
  config.num_kv_blocks = 16;
  engine::Engine core(config, runner);
  ServeMetrics metrics("m");
  EngineService service(core, metrics, /*max_waiting=*/4);
  const Sink ignore = [](Event) {};

  ASSERT_TRUE(service.submit(requests(3, "a"), ignore).ok());
  const Status later = service.submit(requests(2, "b"), ignore);  // fits once the queue drains
  EXPECT_EQ(later.code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(later.message(), "the server is at capacity (3 requests waiting, limit 4); retry after a short wait");
  const Status never = service.submit(requests(5, "c"), ignore);  // more than the queue ever holds
  EXPECT_EQ(never.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(never.message(),
            "this request holds 5 sequences (prompts times n), more than the server ever queues at once "
            "(--max-waiting 4); send at most 4 per request");
  EXPECT_TRUE(service.submit(requests(1, "d"), ignore).ok());  // exactly full
  EXPECT_EQ(service.num_unfinished(), 4);
}

}  // namespace
}  // namespace koi::serve
