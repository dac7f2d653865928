#include "serve/tool_calls.h"

#include <gtest/gtest.h>

namespace koi::serve {
namespace {

TEST(ToolCallsTest, HermesBlocksBecomeCallsAndTheRestContent) {
  const std::string text =
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 1, \"b\": {\"c\": [2]}}}\n</tool_call>";
  ParsedOutput p = parse_tool_calls(text, ToolFormat::kHermes, "call_x");
  EXPECT_EQ(p.content, "Let me check.");
  ASSERT_EQ(p.calls.size(), 2u);
  EXPECT_EQ(p.calls[0].id, "call_x_0");
  EXPECT_EQ(p.calls[0].name, "get_weather");
  EXPECT_EQ(p.calls[0].arguments, "{\"city\": \"Paris\"}");
  EXPECT_EQ(p.calls[1].id, "call_x_1");
  EXPECT_EQ(p.calls[1].arguments, "{\"a\": 1, \"b\": {\"c\": [2]}}");
}

TEST(ToolCallsTest, MalformedCallsStayContent) {
  const std::string text = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": }\n</tool_call> done";
  ParsedOutput p = parse_tool_calls(text, ToolFormat::kHermes, "c");
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, text);
  EXPECT_TRUE(parse_tool_calls("plain answer", ToolFormat::kLlama3Json, "c").calls.empty());
}

TEST(ToolCallsTest, Llama3JsonWithAndWithoutPythonTag) {
  for (const std::string text : {"{\"name\": \"f\", \"parameters\": {\"x\": 2}}",
                                 "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 2}}"}) {
    ParsedOutput p = parse_tool_calls(text, ToolFormat::kLlama3Json, "c");
    ASSERT_EQ(p.calls.size(), 1u) << text;
    EXPECT_EQ(p.calls[0].name, "f");
    EXPECT_EQ(p.calls[0].arguments, "{\"x\": 2}");
    EXPECT_EQ(p.content, "");
  }
}

TEST(ToolCallsTest, FormatFollowsTheTemplate) {
  EXPECT_EQ(detect_tool_format("...<tool_call>\\n..."), ToolFormat::kHermes);
  EXPECT_EQ(detect_tool_format("{{- \"<|python_tag|>\" }}"), ToolFormat::kLlama3Json);
  EXPECT_EQ(detect_tool_format("{{ messages }}"), ToolFormat::kHermes);
}

// Fed one byte at a time, the deltas add up to the whole parse, the arguments grow over
// many deltas, and no delta ever carries the call's own closing brace.
TEST(ToolCallsTest, StreamedDeltasAddUpToTheWholeParse) {
  const std::string text =
      "Sure. <tool_call>\n{\"name\": \"add\", \"arguments\": {\"a\": 12, \"b\": {\"c\": \"}\"}}}\n</tool_call>"
      "<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  for (ToolFormat format : {ToolFormat::kHermes}) {
    ToolCallStreamer s(format, "id");
    std::string content;
    std::vector<std::string> names(2), args(2), ids(2);
    int arg_deltas = 0;
    auto take = [&](const StreamDelta& d) {
      content += d.content;
      for (const ToolCallDelta& c : d.calls) {
        ASSERT_LT(c.index, 2);
        if (!c.id.empty()) {
          ids[c.index] = c.id;
          names[c.index] = c.name;
        }
        args[c.index] += c.arguments;
        if (!c.arguments.empty()) ++arg_deltas;
        EXPECT_EQ(args[c.index].find("}}}"), std::string::npos) << args[c.index];
      }
    };
    for (char ch : text) take(s.push(std::string(1, ch)));
    take(s.finish());
    ParsedOutput whole = parse_tool_calls(text, format, "id");
    EXPECT_EQ(content, "Sure. ");
    EXPECT_EQ(s.num_calls(), 2);
    for (int i = 0; i < 2; ++i) {
      EXPECT_EQ(ids[i], whole.calls[i].id);
      EXPECT_EQ(names[i], whole.calls[i].name);
      EXPECT_EQ(args[i], whole.calls[i].arguments);
    }
    EXPECT_GT(arg_deltas, 10);
  }
}

TEST(ToolCallsTest, StreamedLlama3CallAndPlainContent) {
  ToolCallStreamer call(ToolFormat::kLlama3Json, "id");
  std::string args, name;
  for (char ch : std::string(" <|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": [1, 2]}}")) {
    for (const ToolCallDelta& d : call.push(std::string(1, ch)).calls) {
      name += d.name;
      args += d.arguments;
    }
  }
  for (const ToolCallDelta& d : call.finish().calls) args += d.arguments;
  EXPECT_EQ(name, "f");
  EXPECT_EQ(args, "{\"x\": [1, 2]}");
  ToolCallStreamer text(ToolFormat::kLlama3Json, "id");
  EXPECT_EQ(text.push(" ").content, "");  // not known yet
  EXPECT_EQ(text.push("Hi").content, " Hi");
  EXPECT_EQ(text.push(" there").content, " there");
  EXPECT_EQ(text.num_calls(), 0);
}

}  // namespace
}  // namespace koi::serve
