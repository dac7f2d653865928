// ChatTemplate: a model's Jinja chat template (tokenizer_config.json "chat_template", GGUF
// tokenizer.chat_template), rendered the way Hugging Face transformers renders it
// (Python jinja2 with trim_blocks, lstrip_blocks, the tojson override, raise_exception and
// strftime_now). Checked byte for byte against @huggingface/jinja on the real Llama 3 / 3.1
// / 3.2, Qwen2 / 2.5 / 3 and Mistral templates (tests/chat_template_compat.sh).
//
// A ChatTemplate is immutable after parse() and cheap to copy (the syntax tree is shared);
// render() is thread-safe. Failures are Status values, never crashes: syntax errors name
// line:column and what was expected; raise_exception("msg") in a template fails with
// invalid_argument "msg"; other runtime errors read "L:C: ..." (line:column of the expression). Every render is
// bounded in steps, output size, value nesting and macro recursion (jinja/interpreter.h).
//
// The template sees: messages (a list of {"role", "content"} dicts, plus each message's
// extra_json fields), add_generation_prompt, bos_token, eos_token, tools = none and
// documents = none (as transformers passes them), then the keys of extra_context_json, which
// override all of these. Not supported: template inheritance and includes ({% extends %},
// {% include %}, {% block %}), {% raw %}, recursive loops, non-ASCII case mapping in
// upper/lower/title/capitalize, and Python methods beyond those chat templates use.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace koi::tokenizer {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant", "tool"
  std::string content;
  // Optional JSON object whose fields are added to the message (tool_calls,
  // reasoning_content, name, ...); "" for none.
  std::string extra_json = "";
};

struct ChatTemplateInputs {
  std::vector<ChatMessage> messages;
  bool add_generation_prompt = true;
  std::string bos_token;  // text of the BOS token ("<|begin_of_text|>", "<s>") or ""
  std::string eos_token;
  // Optional JSON object of further template variables, e.g.
  // {"tools": [...], "enable_thinking": false, "date_string": "26 Jul 2024"}; "" for none.
  std::string extra_context_json = "";
  // The time strftime_now() formats, in local time as Python's datetime.now(); unset: now.
  std::optional<std::chrono::system_clock::time_point> now = std::nullopt;
};

class ChatTemplate {  // immutable after parse; render() is thread-safe
 public:
  // Syntax errors: Status naming line:column and what was expected.
  static Result<ChatTemplate> parse(std::string source);
  // raise_exception("msg") -> Status invalid_argument "msg"; runtime errors -> Status with a
  // clear message; never crashes; recursion and loop iterations are bounded.
  Result<std::string> render(const ChatTemplateInputs& inputs) const;

  // The template text after Jinja's newline normalization.
  const std::string& source() const;

 private:
  struct Program;
  explicit ChatTemplate(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

// The fallback for models without a template, ChatML as Qwen and many fine-tunes use it:
//   <|im_start|>{role}\n{content}<|im_end|>\n   for every message (a null content is empty;
//   an assistant's tool_calls follow as <tool_call>\n{"name", "arguments"}\n</tool_call>), then
//   <|im_start|>assistant\n                     when add_generation_prompt is true.
// bos_token is not added (the tokenizer adds it when the model wants one).
std::string default_chat_template();

}  // namespace koi::tokenizer
