// Engine::set_trace (engine/step_trace.h): the step spans are the instants StepStats reports,
// their parts tile them, and each request has a span on a track of its own with its phases.
#include "engine/step_trace.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include <algorithm>
#include <map>

namespace koi::engine {
namespace {

constexpr int kVocab = 16;

// Logits that make token 1 the greedy pick; forward records one span of its own, as the Llama
// runner records its layers.
class TracedRunner final : public ModelRunner {
 public:
  int n_vocab() const override { return kVocab; }
  int max_context() const override { return 256; }
  void set_trace(trace::Recorder* trace) override { trace_ = trace; }
  Status forward(const model::ForwardBatch& batch, float* logits) override {
    const trace::Span span(trace_, "layer 0", "layer");
    for (size_t row = 0; row < batch.logit_indices.size(); ++row) {
      for (int v = 0; v < kVocab; ++v) logits[row * kVocab + v] = v == 1 ? 1.0f : 0.0f;
    }
    return ok_status();
  }

 private:
  trace::Recorder* trace_ = nullptr;
};

RequestSpec greedy(const std::string& id, std::vector<int32_t> prompt, int max_tokens) {
  RequestSpec spec;
  spec.id = id;
  spec.prompt = std::move(prompt);
  spec.params.temperature = 0.0f;
  spec.params.max_tokens = max_tokens;
  return spec;
}

struct Span {
  std::string name;
  int64_t tid;
  double ts, dur;
  boost::json::object args;
};

std::vector<Span> spans(const trace::Recorder& r) {
  std::vector<Span> out;
  const boost::json::value trace = boost::json::parse(r.to_json());
  for (const auto& e : trace.at("traceEvents").as_array()) {
    if (e.at("ph") != "X") continue;
    Span s{std::string(e.at("name").as_string()), e.at("tid").as_int64(), e.at("ts").to_number<double>(),
           e.at("dur").to_number<double>(), {}};
    if (e.as_object().contains("args")) s.args = e.at("args").as_object();
    out.push_back(std::move(s));
  }
  return out;
}

TEST(StepTrace, StepSpansLastTheReportedStepTimeAndHoldTheirParts) {
  TracedRunner runner;
  EngineConfig config;
  config.block_size = 4, config.num_kv_blocks = 64, config.max_num_batched_tokens = 64, config.max_num_seqs = 8;
  Engine engine(config, runner);
  trace::Recorder recorder;
  engine.set_trace(&recorder);
  ASSERT_TRUE(engine.add_request(greedy("a", {1, 2, 3, 4, 5, 6}, 3)).ok());
  ASSERT_TRUE(engine.add_request(greedy("b", {7, 8, 9}, 2)).ok());
  std::map<int64_t, double> reported;  // step number -> total_seconds
  while (engine.has_unfinished()) {
    ASSERT_TRUE(engine.step().ok());
    reported[engine.last_step().number] = engine.last_step().total_seconds;
  }
  ASSERT_TRUE(engine.add_request(greedy("c", {4, 5}, 1)).ok());  // after a and b: reuses track 1
  while (engine.has_unfinished()) ASSERT_TRUE(engine.step().ok());
  reported[engine.last_step().number] = engine.last_step().total_seconds;

  const std::vector<Span> all = spans(recorder);
  std::vector<const Span*> steps;
  for (const Span& s : all) {
    if (s.name == "step") steps.push_back(&s);
  }
  ASSERT_EQ(steps.size(), reported.size());
  for (const Span* step : steps) {
    const int64_t number = step->args.at("step").as_int64();
    ASSERT_TRUE(reported.count(number));
    EXPECT_NEAR(step->dur, reported[number] * 1e6, 0.002) << "step " << number;  // printed to 1 ns
    EXPECT_EQ(step->tid, 0);
    // Its parts tile it, in order, and the runner's span is inside "forward".
    std::vector<std::string> parts;
    double covered = 0, next = step->ts;
    for (const Span& s : all) {
      if (s.tid != 0 || s.ts < step->ts || s.ts + s.dur > step->ts + step->dur + 0.002 || &s == step) continue;
      if (s.name == "layer 0") continue;
      parts.push_back(s.name);
      EXPECT_NEAR(s.ts, next, 0.002) << s.name;
      next = s.ts + s.dur;
      covered += s.dur;
    }
    EXPECT_EQ(parts, (std::vector<std::string>{"schedule", "forward", "sample", "update"}));
    EXPECT_NEAR(covered, step->dur, 0.01);
  }
  EXPECT_EQ(steps[0]->args.at("prefill_requests").as_int64(), 2);
  EXPECT_EQ(steps[0]->args.at("prefill_tokens").as_int64(), 9);
  EXPECT_EQ(steps[1]->args.at("decode_requests").as_int64(), 2);
  for (const Span& s : all) {
    if (s.name != "layer 0") continue;
    const bool inside = std::any_of(all.begin(), all.end(), [&](const Span& f) {
      return f.name == "forward" && f.ts <= s.ts + 0.002 && s.ts + s.dur <= f.ts + f.dur + 0.002;
    });
    EXPECT_TRUE(inside) << "runner span at " << s.ts << " outside every forward span";
  }

  std::map<std::string, const Span*> requests;
  for (const Span& s : all) {
    if (s.name == "request") requests[std::string(s.args.at("id").as_string())] = &s;
  }
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests["a"]->tid, 1);
  EXPECT_EQ(requests["b"]->tid, 2);
  EXPECT_EQ(requests["c"]->tid, 1);
  EXPECT_EQ(requests["a"]->args.at("output_tokens").as_int64(), 3);
  EXPECT_EQ(requests["a"]->args.at("prompt_tokens").as_int64(), 6);
  EXPECT_EQ(requests["a"]->args.at("finish_reason").as_string(), "length");
  // a: waiting, then prefill until its first token (step 1's end), then decode to its end.
  std::vector<std::string> phases;
  double t = requests["a"]->ts;
  for (const Span& s : all) {
    if (s.tid != 1 || s.name == "request" || s.ts < requests["a"]->ts || s.ts >= requests["a"]->ts + requests["a"]->dur) continue;
    phases.push_back(s.name);
    EXPECT_NEAR(s.ts, t, 0.002) << s.name;
    t = s.ts + s.dur;
  }
  EXPECT_EQ(phases, (std::vector<std::string>{"waiting", "prefill", "decode"}));
  EXPECT_NEAR(t, requests["a"]->ts + requests["a"]->dur, 0.002);
}

TEST(StepTrace, AnAbortedWaitingRequestIsAllWaiting) {
  TracedRunner runner;
  EngineConfig config;
  config.block_size = 4, config.num_kv_blocks = 64, config.max_num_batched_tokens = 64, config.max_num_seqs = 8;
  Engine engine(config, runner);
  trace::Recorder recorder;
  engine.set_trace(&recorder);
  ASSERT_TRUE(engine.add_request(greedy("x", {1, 2}, 4)).ok());
  ASSERT_TRUE(engine.abort("x").ok());
  ASSERT_TRUE(engine.step().ok());
  std::vector<std::string> names;
  for (const Span& s : spans(recorder)) names.push_back(s.name);
  EXPECT_EQ(names, (std::vector<std::string>{"request", "waiting"}));
  engine.set_trace(nullptr);
  ASSERT_TRUE(engine.add_request(greedy("y", {1, 2}, 1)).ok());
  while (engine.has_unfinished()) ASSERT_TRUE(engine.step().ok());
  EXPECT_EQ(recorder.size(), 2u);  // nothing after set_trace(nullptr)
}

}  // namespace
}  // namespace koi::engine
