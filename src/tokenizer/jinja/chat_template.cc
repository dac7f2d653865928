#include "tokenizer/jinja/chat_template.h"

#include <boost/json.hpp>

#include <ctime>

#include "tokenizer/jinja/interpreter.h"
#include "tokenizer/jinja/lexer.h"
#include "tokenizer/jinja/parser.h"

namespace koi::tokenizer {

struct ChatTemplate::Program {
  std::string source;  // normalized (jinja's newline handling)
  jinja::Body body;
};

namespace {

using jinja::Value;

Value from_json(const boost::json::value& j) {
  switch (j.kind()) {
    case boost::json::kind::null: return Value(jinja::None{});
    case boost::json::kind::bool_: return Value(j.get_bool());
    case boost::json::kind::int64: return Value(j.get_int64());
    case boost::json::kind::uint64: return Value(static_cast<double>(j.get_uint64()));
    case boost::json::kind::double_: return Value(j.get_double());
    case boost::json::kind::string: return Value(std::string(j.get_string()));
    case boost::json::kind::array: {
      jinja::List items;
      for (const auto& item : j.get_array()) items.push_back(from_json(item));
      return Value(std::move(items));
    }
    case boost::json::kind::object: {
      jinja::Dict d;
      for (const auto& [k, v] : j.get_object()) d.set(std::string(k), from_json(v));
      return Value::dict(std::move(d));
    }
  }
  return Value();
}

// Parses a JSON object ("" is an empty one); `what` names the field in errors.
Result<boost::json::object> parse_object(const std::string& text, const std::string& what) {
  if (text.empty()) return boost::json::object();
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(text, ec);  // nesting is capped by Boost (32 levels)
  if (ec || !v.is_object()) {
    return Status::invalid_argument(what + " must be a JSON object" + (ec ? " (" + ec.message() + ")" : ""));
  }
  return std::move(v.as_object());
}

Value strftime_now(std::chrono::system_clock::time_point now) {
  return Value::callable("strftime_now", [now](jinja::Args& args) -> Result<Value> {
    if (args.positional.size() != 1 || !args.positional[0].is_string()) {
      return Status::invalid_argument("expects one format string, e.g. strftime_now(\"%d %b %Y\")");
    }
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm local{};
    localtime_r(&t, &local);
    char buf[256];
    size_t n = std::strftime(buf, sizeof(buf), args.positional[0].as_string().c_str(), &local);
    return Value(std::string(buf, n));
  });
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string source) {
  auto program = std::make_shared<Program>();
  program->source = jinja::normalize_newlines(source);
  KOI_ASSIGN_OR_RETURN(program->body, jinja::parse(program->source));
  return ChatTemplate(std::move(program));
}

const std::string& ChatTemplate::source() const { return program_->source; }

Result<std::string> ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  jinja::List messages;
  for (size_t i = 0; i < inputs.messages.size(); ++i) {
    const ChatMessage& m = inputs.messages[i];
    jinja::Dict d;
    d.set("role", m.role);
    d.set("content", m.content);
    KOI_ASSIGN_OR_RETURN(boost::json::object extra,
                         parse_object(m.extra_json, "messages[" + std::to_string(i) + "].extra_json"));
    for (const auto& [k, v] : extra) d.set(std::string(k), from_json(v));
    messages.push_back(Value::dict(std::move(d)));
  }
  std::vector<std::pair<std::string, Value>> globals = {
      {"messages", Value(std::move(messages))},
      {"add_generation_prompt", Value(inputs.add_generation_prompt)},
      {"bos_token", Value(inputs.bos_token)},
      {"eos_token", Value(inputs.eos_token)},
      {"tools", Value(jinja::None{})},
      {"documents", Value(jinja::None{})},
      {"strftime_now", strftime_now(inputs.now.value_or(std::chrono::system_clock::now()))},
  };
  KOI_ASSIGN_OR_RETURN(boost::json::object extra, parse_object(inputs.extra_context_json, "extra_context_json"));
  for (const auto& [k, v] : extra) globals.emplace_back(std::string(k), from_json(v));
  return jinja::render(program_->body, program_->source, globals);
}

std::string default_chat_template() {
  return "{% for message in messages %}"
         "{{ '<|im_start|>' + message['role'] + '\\n' }}"
         "{% if message['content'] is not none %}{{ message['content'] }}{% endif %}"
         "{% if message['tool_calls'] is defined %}{% for call in message['tool_calls'] %}"
         "{{ '<tool_call>\\n' + (call['function'] | tojson) + '\\n</tool_call>' }}"
         "{% endfor %}{% endif %}"
         "{{ '<|im_end|>' + '\\n' }}"
         "{% endfor %}"
         "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}";
}

}  // namespace koi::tokenizer
