// Tool calls: the model's text turned into OpenAI `tool_calls`, whole or as streamed deltas,
// and the constraint that forces a call when tool_choice is "required" or names a function.
//
// Formats (chosen from the chat template): Hermes / Qwen 2.5 wrap each call in
//   <tool_call>\n{"name": "f", "arguments": {...}}\n</tool_call>
// (several calls are several blocks, text around them is content); Llama 3.1 JSON is the
// whole output as one {"name": "f", "parameters": {...}} object, optionally after
// <|python_tag|>. `arguments` comes back as the JSON text the model wrote (OpenAI sends a
// string), checked to parse as an object; text that does not parse stays content.
// Pure functions and a per-choice streaming parser (not thread-safe; one per choice).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "grammar/constraint.h"

namespace koi::serve {

enum class ToolFormat { kHermes, kLlama3Json };

// Hermes unless the template speaks Llama 3.1's JSON format (<|python_tag|> without <tool_call>).
ToolFormat detect_tool_format(std::string_view chat_template_source);

struct Tool {
  std::string name;
  std::string parameters_json;  // a JSON schema, "" for none
};

enum class ToolChoice { kNone, kAuto, kRequired, kNamed };

// The constraint forcing one call of one of `tools` in `format`.
grammar::Constraint forced_tool_call(const std::vector<Tool>& tools, ToolFormat format);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text
};

struct ParsedOutput {
  std::string content;          // text outside the calls
  std::vector<ToolCall> calls;  // ids "<id_prefix>_<index>"
};
ParsedOutput parse_tool_calls(std::string_view text, ToolFormat format, const std::string& id_prefix);

// One streamed change: new content, and per call either its start (id and name, empty
// arguments) or more of its arguments.
struct ToolCallDelta {
  int index = 0;
  std::string id;    // set on the call's first delta only
  std::string name;  // likewise
  std::string arguments;
};
struct StreamDelta {
  std::string content;
  std::vector<ToolCallDelta> calls;
  bool empty() const { return content.empty() && calls.empty(); }
};

// Content streams as it comes, except text that may begin a call, held until it is known;
// a call's arguments stream as they grow, holding back only what may be the closing.
// Concatenating every delta gives what parse_tool_calls gives for the whole text.
class ToolCallStreamer {
 public:
  ToolCallStreamer(ToolFormat format, std::string id_prefix) : format_(format), id_prefix_(std::move(id_prefix)) {}

  StreamDelta push(std::string_view text);
  StreamDelta finish();  // the end of the output
  int num_calls() const { return num_calls_; }

 private:
  void scan(StreamDelta* out, bool at_end);
  void start_call();
  bool stream_arguments(StreamDelta* out);  // false: no header yet
  void end_call(std::string_view body, StreamDelta* out);

  ToolFormat format_;
  std::string id_prefix_;
  std::string buffer_;       // not yet emitted
  bool in_call_ = false;
  bool decided_ = false;     // Llama 3 JSON: whether the output is a call
  bool header_sent_ = false;
  size_t args_begin_ = 0;    // in buffer_, once the header is parsed
  size_t args_sent_ = 0;     // bytes of the arguments emitted
  int num_calls_ = 0;
};

}  // namespace koi::serve
