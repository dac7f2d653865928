#include "serve/api.h"

#include <charconv>
#include <limits>
#include <set>

#include <fmt/format.h>

#include "engine/block_hash.h"

namespace koi::serve {
namespace json = boost::json;

std::string error_body(const ApiError& e) {
  json::object err{{"message", e.message},
                   {"type", e.type},
                   {"param", e.param.empty() ? json::value(nullptr) : json::value(e.param)},
                   {"code", e.code.empty() ? json::value(nullptr) : json::value(e.code)}};
  return json::serialize(json::object{{"error", std::move(err)}});
}

ApiError bad_request(std::string message, std::string param) {
  ApiError e;
  e.message = std::move(message);
  e.param = std::move(param);
  return e;
}

namespace {

constexpr int kMaxLogprobs = 20;
constexpr int kMaxN = 128;
constexpr int kMaxStop = 4;

std::string_view kind_name(const json::value& v) {
  switch (v.kind()) {
    case json::kind::null: return "null";
    case json::kind::bool_: return "a boolean";
    case json::kind::int64:
    case json::kind::uint64: return "an integer";
    case json::kind::double_: return "a number";
    case json::kind::string: return "a string";
    case json::kind::array: return "an array";
    case json::kind::object: return "an object";
  }
  return "unknown";
}

// Reads the fields of one JSON object, remembering which were read so that the rest can be
// reported as unknown. Each getter leaves `out` alone when the field is absent or null and
// returns false (with error set) when it is present with a wrong type or value.
class FieldReader {
 public:
  FieldReader(const json::object& obj, std::string prefix = "") : obj_(obj), prefix_(std::move(prefix)) {}

  const json::value* take(std::string_view key) {
    seen_.insert(std::string(key));
    const json::value* v = obj_.if_contains(key);
    return v && !v->is_null() ? v : nullptr;
  }
  bool fail(std::string_view key, std::string message) {
    if (!error) error = bad_request(std::move(message), prefix_ + std::string(key));
    return false;
  }
  bool wrong_type(std::string_view key, std::string_view want, const json::value& got) {
    return fail(key, fmt::format("'{}{}' must be {}, got {}", prefix_, key, want, kind_name(got)));
  }

  bool get_bool(std::string_view key, bool* out) {
    const json::value* v = take(key);
    if (!v) return true;
    if (!v->is_bool()) return wrong_type(key, "a boolean", *v);
    *out = v->as_bool();
    return true;
  }
  bool get_int(std::string_view key, int64_t lo, int64_t hi, int64_t* out) {
    const json::value* v = take(key);
    if (!v) return true;
    std::optional<int64_t> x;
    if (v->is_int64()) x = v->as_int64();
    if (v->is_uint64() && v->as_uint64() <= uint64_t(std::numeric_limits<int64_t>::max())) x = int64_t(v->as_uint64());
    if (!x && !v->is_uint64()) return wrong_type(key, "an integer", *v);
    if (!x || *x < lo || *x > hi) {
      return fail(key, fmt::format("'{}{}' must be an integer between {} and {}, got {}", prefix_, key, lo, hi,
                                   json::serialize(*v)));
    }
    *out = *x;
    return true;
  }
  bool get_int(std::string_view key, int lo, int hi, int* out) {
    int64_t x = *out;
    if (!get_int(key, int64_t{lo}, int64_t{hi}, &x)) return false;
    *out = static_cast<int>(x);
    return true;
  }
  bool get_float(std::string_view key, double lo, double hi, float* out) {
    const json::value* v = take(key);
    if (!v) return true;
    if (!v->is_number()) return wrong_type(key, "a number", *v);
    const double x = v->to_number<double>();
    if (!(x >= lo && x <= hi)) {
      return fail(key, fmt::format("'{}{}' must be between {} and {}, got {}", prefix_, key, lo, hi, x));
    }
    *out = static_cast<float>(x);
    return true;
  }
  bool get_string(std::string_view key, std::string* out) {
    const json::value* v = take(key);
    if (!v) return true;
    if (!v->is_string()) return wrong_type(key, "a string", *v);
    *out = std::string(v->as_string());
    return true;
  }
  // Rejects a field Koi knows but does not implement, unless it has its neutral value.
  bool unsupported_unless(std::string_view key, const json::value& neutral, std::string_view hint) {
    const json::value* v = take(key);
    if (!v || *v == neutral) return true;
    return fail(key, fmt::format("'{}' is not supported yet{}", key, hint));
  }
  // After all getters: the first field nobody read is an error, as in OpenAI's API.
  bool no_unknown_fields() {
    for (const auto& kv : obj_) {
      if (!seen_.count(std::string(kv.key()))) {
        return fail(kv.key(), fmt::format("Unrecognized request argument supplied: {}{}", prefix_,
                                          std::string_view(kv.key())));
      }
    }
    return true;
  }

  std::optional<ApiError> error;

 private:
  const json::object& obj_;
  std::string prefix_;
  std::set<std::string> seen_;
};

std::optional<ApiError> parse_object(std::string_view body, json::value* out) {
  boost::system::error_code ec;
  json::parse_options opts;
  opts.max_depth = 64;
  *out = json::parse(body, ec, {}, opts);
  if (ec) {
    return bad_request(fmt::format("the request body is not valid JSON ({}); send a JSON object encoded in UTF-8",
                                   ec.message()));
  }
  if (!out->is_object()) return bad_request("the request body must be a JSON object, got " + std::string(kind_name(*out)));
  return std::nullopt;
}

bool parse_token_ids(const json::array& arr, std::vector<int32_t>* out) {
  for (const auto& t : arr) {
    if (!t.is_int64() || t.as_int64() < 0 || t.as_int64() > std::numeric_limits<int32_t>::max()) return false;
    out->push_back(static_cast<int32_t>(t.as_int64()));
  }
  return true;
}

// Reads the token ids of `arr`, the value of parameter `param` at `where` ("prompt[1]"); an
// element that is not an integer in [0, n_vocab) is an error naming it ("prompt[1][3]").
bool read_token_ids(FieldReader& f, std::string_view param, const std::string& where, const json::array& arr,
                    int32_t n_vocab, std::vector<int32_t>* out) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const json::value& t = arr[i];
    if (!t.is_int64() || t.as_int64() < 0 || t.as_int64() >= n_vocab) {
      return f.fail(param, fmt::format("{}[{}] must be a token id in [0, {}), got {}", where, i, n_vocab,
                                       json::serialize(t)));
    }
    out->push_back(static_cast<int32_t>(t.as_int64()));
  }
  return true;
}

bool parse_prompts(FieldReader& f, int32_t n_vocab, std::vector<Prompt>* out) {
  const json::value* v = f.take("prompt");
  if (!v) return f.fail("prompt", "'prompt' is required: a string, an array of strings, or token ids");
  const char* kWant = "'prompt' must be a string, an array of strings, an array of token ids or an array of those";
  if (v->is_string()) {
    out->push_back({std::string(v->as_string()), {}, false});
    return true;
  }
  if (!v->is_array() || v->as_array().empty()) return f.fail("prompt", kWant);
  const json::array& arr = v->as_array();
  if (arr.front().is_number()) {  // one prompt of token ids
    Prompt tokens{{}, {}, true};
    if (!read_token_ids(f, "prompt", "prompt", arr, n_vocab, &tokens.token_ids)) return false;
    out->push_back(std::move(tokens));
    return true;
  }
  for (size_t i = 0; i < arr.size(); ++i) {
    const json::value& item = arr[i];
    Prompt p;
    if (item.is_string()) {
      p.text = std::string(item.as_string());
    } else if (item.is_array() && !item.as_array().empty()) {
      if (!read_token_ids(f, "prompt", fmt::format("prompt[{}]", i), item.as_array(), n_vocab, &p.token_ids)) {
        return false;
      }
      p.is_tokens = true;
    } else {
      return f.fail("prompt", kWant);
    }
    out->push_back(std::move(p));
  }
  return true;
}

// An assistant message's tool_calls as chat templates get them: arguments parsed from their
// JSON string into an object. Nothing when the shape is wrong.
std::optional<json::array> template_tool_calls(const json::value& calls) {
  if (!calls.is_array()) return std::nullopt;
  json::array out;
  for (const auto& c : calls.as_array()) {
    const json::object* o = c.if_object();
    const json::value* fn = o ? o->if_contains("function") : nullptr;
    const json::object* fo = fn ? fn->if_object() : nullptr;
    const json::value* name = fo ? fo->if_contains("name") : nullptr;
    const json::value* args = fo ? fo->if_contains("arguments") : nullptr;
    if (!name || !name->is_string() || !args) return std::nullopt;
    json::value parsed = *args;
    if (args->is_string()) {
      boost::system::error_code ec;
      parsed = json::parse(args->as_string(), ec);
      if (ec) return std::nullopt;
    }
    json::object call;
    if (const json::value* id = o->if_contains("id")) call["id"] = *id;
    call["type"] = "function";
    call["function"] = json::object{{"name", *name}, {"arguments", std::move(parsed)}};
    out.push_back(std::move(call));
  }
  return out;
}

bool parse_messages(FieldReader& f, std::vector<Message>* out) {
  const json::value* v = f.take("messages");
  if (!v) return f.fail("messages", "'messages' is required: an array of {\"role\", \"content\"} objects");
  if (!v->is_array()) return f.wrong_type("messages", "an array", *v);
  if (v->as_array().empty()) return f.fail("messages", "'messages' must contain at least one message");
  static const std::set<std::string> kRoles = {"system", "developer", "user", "assistant", "tool"};
  int index = 0;
  for (const auto& item : v->as_array()) {
    const std::string where = fmt::format("messages[{}].", index++);
    if (!item.is_object()) return f.fail("messages", fmt::format("'{}' must be an object", where.substr(0, where.size() - 1)));
    FieldReader m(item.as_object(), where);
    Message msg;
    std::string name;
    m.get_string("role", &msg.role);
    m.get_string("name", &name);
    if (!m.error && !kRoles.count(msg.role)) {
      m.fail("role", fmt::format("'{}role' must be one of system, developer, user, assistant, tool; got '{}'", where, msg.role));
    }
    if (const json::value* c = m.take("content")) {
      if (c->is_string()) {
        msg.content = std::string(c->as_string());
      } else if (c->is_array()) {
        // Content parts: only text parts, joined by newlines (as vLLM does).
        for (const auto& part : c->as_array()) {
          const json::object* po = part.if_object();
          const json::value* type = po ? po->if_contains("type") : nullptr;
          const json::value* text = po ? po->if_contains("text") : nullptr;
          if (!type || *type != "text" || !text || !text->is_string()) {
            m.fail("content", fmt::format("'{}content' parts must be {{\"type\": \"text\", \"text\": ...}}; images and "
                                          "audio are not supported", where));
            break;
          }
          if (!msg.content.empty()) msg.content += "\n";
          msg.content += std::string(text->as_string());
        }
      } else {
        m.wrong_type("content", "a string or an array of content parts", *c);
      }
    } else if (!m.error && msg.role != "assistant") {
      m.fail("content", fmt::format("'{}content' is required", where));
    }
    json::object extra;
    if (!name.empty()) extra["name"] = name;
    if (const json::value* calls = m.take("tool_calls")) {
      if (msg.role != "assistant") {
        m.fail("tool_calls", fmt::format("'{}tool_calls' is only allowed on assistant messages", where));
      } else if (auto rendered = template_tool_calls(*calls)) {
        extra["tool_calls"] = std::move(*rendered);
      } else {
        m.fail("tool_calls", fmt::format("'{}tool_calls' must be an array of {{\"id\", \"type\": \"function\", "
                                         "\"function\": {{\"name\", \"arguments\": a JSON object as a string}}}}",
                                         where));
      }
    }
    std::string tool_call_id;
    m.get_string("tool_call_id", &tool_call_id);
    if (!tool_call_id.empty()) extra["tool_call_id"] = tool_call_id;
    if (!extra.empty()) msg.extra_json = json::serialize(extra);
    m.no_unknown_fields();
    if (m.error) {
      f.error = m.error;
      return false;
    }
    out->push_back(std::move(msg));
  }
  return true;
}

bool parse_stop(FieldReader& f, std::vector<std::string>* out) {
  const json::value* v = f.take("stop");
  if (!v) return true;
  if (v->is_string()) {
    out->push_back(std::string(v->as_string()));
  } else if (v->is_array() && v->as_array().size() <= kMaxStop) {
    for (const auto& s : v->as_array()) {
      if (!s.is_string()) return f.fail("stop", "'stop' must be a string or an array of strings");
      out->push_back(std::string(s.as_string()));
    }
  } else {
    return f.fail("stop", fmt::format("'stop' must be a string or an array of at most {} strings", kMaxStop));
  }
  for (const auto& s : *out) {
    if (s.empty()) return f.fail("stop", "'stop' strings must not be empty");
  }
  return true;
}

bool parse_logit_bias(FieldReader& f, std::map<int32_t, float>* out) {
  const json::value* v = f.take("logit_bias");
  if (!v) return true;
  if (!v->is_object()) return f.wrong_type("logit_bias", "an object mapping token ids to biases", *v);
  for (const auto& kv : v->as_object()) {
    const std::string_view key = kv.key();
    int32_t id = 0;
    auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || end != key.data() + key.size() || id < 0) {
      return f.fail("logit_bias", fmt::format("'logit_bias' keys must be token ids, got '{}'", key));
    }
    if (!kv.value().is_number() || std::abs(kv.value().to_number<double>()) > 100) {
      return f.fail("logit_bias", fmt::format("'logit_bias' values must be numbers between -100 and 100 (token {})", id));
    }
    (*out)[id] = kv.value().to_number<float>();
  }
  return true;
}

bool parse_stream_options(FieldReader& f, bool stream, bool* include_usage, bool* continuous_usage) {
  const json::value* v = f.take("stream_options");
  if (!v) return true;
  if (!stream) return f.fail("stream_options", "'stream_options' is only allowed when 'stream' is true");
  if (!v->is_object()) return f.wrong_type("stream_options", "an object", *v);
  FieldReader o(v->as_object(), "stream_options.");
  o.get_bool("include_usage", include_usage);
  o.get_bool("continuous_usage_stats", continuous_usage);
  o.no_unknown_fields();
  if (o.error) f.error = o.error;
  return !o.error;
}

// Sets the request's constraint once; a second source of one is an error.
bool set_constraint(FieldReader& f, GenerateRequest* r, std::string_view param, grammar::Constraint c,
                    std::string where) {
  if (r->constraint) {
    return f.fail(param, fmt::format("'{}' and '{}' both constrain the output; give only one", r->constraint_param,
                                     param));
  }
  r->constraint = std::move(c);
  r->constraint_param = std::move(where);
  return true;
}

bool parse_json_schema(FieldReader& f, const json::value& v, GenerateRequest* r) {
  if (!v.is_object()) return f.wrong_type("response_format", "an object", v);
  FieldReader o(v.as_object(), "response_format.json_schema.");
  std::string name, description;
  bool strict = false;
  o.get_string("name", &name);
  o.get_string("description", &description);
  o.get_bool("strict", &strict);
  const json::value* schema = o.take("schema");
  if (!o.error && name.empty()) o.fail("name", "'response_format.json_schema.name' is required: a string naming the schema");
  if (!o.error && schema && !schema->is_object() && !schema->is_bool()) {
    o.wrong_type("schema", "an object (a JSON schema)", *schema);
  }
  o.no_unknown_fields();
  if (o.error) {
    f.error = o.error;
    return false;
  }
  // No schema: any JSON object, as OpenAI treats it.
  grammar::Constraint c{schema ? grammar::ConstraintKind::kJsonSchema : grammar::ConstraintKind::kJsonObject,
                        schema ? json::serialize(*schema) : "", {}};
  return set_constraint(f, r, "response_format", std::move(c), "response_format.json_schema.schema");
}

bool parse_response_format(FieldReader& f, GenerateRequest* r) {
  const json::value* v = f.take("response_format");
  if (!v) return true;
  const json::object* o = v->if_object();
  const json::value* type = o ? o->if_contains("type") : nullptr;
  if (!type || !type->is_string()) {
    return f.fail("response_format", "'response_format' must be an object with a 'type', e.g. {\"type\": \"text\"}");
  }
  FieldReader rf(*o, "response_format.");
  rf.take("type");
  if (*type == "json_schema") {
    const json::value* js = rf.take("json_schema");
    rf.no_unknown_fields();
    if (rf.error) {
      f.error = rf.error;
      return false;
    }
    if (!js) return f.fail("response_format", "'response_format.json_schema' is required for type 'json_schema'");
    return parse_json_schema(f, *js, r);
  }
  rf.no_unknown_fields();
  if (rf.error) {
    f.error = rf.error;
    return false;
  }
  if (*type == "text") return true;
  if (*type == "json_object") {
    return set_constraint(f, r, "response_format", {grammar::ConstraintKind::kJsonObject, "", {}}, "response_format");
  }
  return f.fail("response_format", fmt::format("response_format type '{}' is unknown; use 'text', 'json_object' or "
                                               "'json_schema'",
                                               std::string_view(type->as_string())));
}

bool valid_tool_name(std::string_view name) {
  if (name.empty() || name.size() > 64) return false;
  for (char c : name) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-') return false;
  }
  return true;
}

bool parse_tools(FieldReader& f, GenerateRequest* r) {
  const json::value* v = f.take("tools");
  if (v) {
    if (!v->is_array()) return f.wrong_type("tools", "an array of {\"type\": \"function\", \"function\": {...}}", *v);
    for (size_t i = 0; i < v->as_array().size(); ++i) {
      const std::string where = fmt::format("tools[{}].", i);
      const json::value& item = v->as_array()[i];
      if (!item.is_object()) return f.fail("tools", fmt::format("'{}' must be an object", where.substr(0, where.size() - 1)));
      FieldReader t(item.as_object(), where);
      std::string type;
      t.get_string("type", &type);
      const json::value* fn = t.take("function");
      t.no_unknown_fields();
      if (!t.error && type != "function") t.fail("type", fmt::format("'{}type' must be \"function\"", where));
      if (!t.error && (!fn || !fn->is_object())) t.fail("function", fmt::format("'{}function' must be an object", where));
      if (t.error) {
        f.error = t.error;
        return false;
      }
      FieldReader fr(fn->as_object(), where + "function.");
      Tool tool;
      std::string description;
      bool strict = false;
      fr.get_string("name", &tool.name);
      fr.get_string("description", &description);
      fr.get_bool("strict", &strict);
      if (const json::value* params = fr.take("parameters")) {
        if (!params->is_object()) {
          fr.wrong_type("parameters", "an object (a JSON schema)", *params);
        } else {
          tool.parameters_json = json::serialize(*params);
        }
      }
      fr.no_unknown_fields();
      if (!fr.error && !valid_tool_name(tool.name)) {
        fr.fail("name", fmt::format("'{}function.name' must be 1 to 64 letters, digits, '_' or '-', got '{}'", where,
                                    tool.name));
      }
      if (fr.error) {
        f.error = fr.error;
        return false;
      }
      r->tools.push_back(std::move(tool));
    }
    if (!r->tools.empty()) r->tools_json = json::serialize(*v);
  }
  r->tool_choice = r->tools.empty() ? ToolChoice::kNone : ToolChoice::kAuto;
  const json::value* c = f.take("tool_choice");
  if (!c) return true;
  const char* kWant = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": "
                      "{\"name\": ...}}";
  if (c->is_string()) {
    const std::string_view s = c->as_string();
    if (s == "none") r->tool_choice = ToolChoice::kNone;
    else if (s == "auto") r->tool_choice = ToolChoice::kAuto;
    else if (s == "required") r->tool_choice = ToolChoice::kRequired;
    else return f.fail("tool_choice", kWant);
  } else {
    const json::object* o = c->if_object();
    const json::value* fn = o ? o->if_contains("function") : nullptr;
    const json::value* name = fn && fn->is_object() ? fn->as_object().if_contains("name") : nullptr;
    if (!name || !name->is_string()) return f.fail("tool_choice", kWant);
    r->tool_choice = ToolChoice::kNamed;
    r->tool_choice_name = std::string(name->as_string());
    bool known = false;
    for (const Tool& t : r->tools) known |= t.name == r->tool_choice_name;
    if (!known) {
      return f.fail("tool_choice", fmt::format("'tool_choice' names '{}', which is not one of 'tools'", r->tool_choice_name));
    }
  }
  if (r->tool_choice != ToolChoice::kNone && r->tools.empty()) {
    return f.fail("tool_choice", "'tool_choice' other than \"none\" needs 'tools'");
  }
  return true;
}

// vLLM's guided decoding fields.
bool parse_guided(FieldReader& f, GenerateRequest* r) {
  if (const json::value* v = f.take("guided_json")) {
    if (!v->is_object() && !v->is_string()) return f.wrong_type("guided_json", "a JSON schema (object or string)", *v);
    std::string text = v->is_string() ? std::string(v->as_string()) : json::serialize(*v);
    if (!set_constraint(f, r, "guided_json", {grammar::ConstraintKind::kJsonSchema, std::move(text), {}}, "guided_json")) {
      return false;
    }
  }
  std::string regex, gbnf;
  if (f.take("guided_regex") && f.get_string("guided_regex", &regex)) {
    if (regex.empty()) return f.fail("guided_regex", "'guided_regex' must be a non-empty regular expression");
    if (!set_constraint(f, r, "guided_regex", {grammar::ConstraintKind::kRegex, regex, {}}, "guided_regex")) return false;
  }
  if (f.take("guided_grammar") && f.get_string("guided_grammar", &gbnf)) {
    if (!set_constraint(f, r, "guided_grammar", {grammar::ConstraintKind::kGrammar, gbnf, {}}, "guided_grammar")) {
      return false;
    }
  }
  if (const json::value* v = f.take("guided_choice")) {
    const char* kWant = "'guided_choice' must be a non-empty array of non-empty strings";
    if (!v->is_array() || v->as_array().empty()) return f.fail("guided_choice", kWant);
    grammar::Constraint c{grammar::ConstraintKind::kChoice, "", {}};
    for (const auto& s : v->as_array()) {
      if (!s.is_string() || s.as_string().empty()) return f.fail("guided_choice", kWant);
      c.choices.push_back(std::string(s.as_string()));
    }
    if (!set_constraint(f, r, "guided_choice", std::move(c), "guided_choice")) return false;
  }
  return !f.error;
}

}  // namespace

std::optional<ApiError> parse_generate_request(ApiKind kind, std::string_view body, int32_t n_vocab,
                                               GenerateRequest* out) {
  json::value root;
  if (auto e = parse_object(body, &root)) return e;
  FieldReader f(root.as_object());
  GenerateRequest& r = *out;
  r.kind = kind;
  engine::SamplingParams& p = r.params;
  const bool chat = kind == ApiKind::kChat;

  if (!f.take("model")) f.fail("model", "'model' is required; GET /v1/models lists the served model");
  f.get_string("model", &r.model);
  if (chat) {
    parse_messages(f, &r.messages);
  } else {
    parse_prompts(f, n_vocab, &r.prompts);
  }
  const int kMaxInt = std::numeric_limits<int>::max();
  int64_t seed = 0;
  f.get_int("max_tokens", 1, kMaxInt, &p.max_tokens);
  if (chat) f.get_int("max_completion_tokens", 1, kMaxInt, &p.max_tokens);
  r.max_tokens_set = root.as_object().contains("max_tokens") && !root.at("max_tokens").is_null();
  if (chat) r.max_tokens_set |= root.as_object().contains("max_completion_tokens") && !root.at("max_completion_tokens").is_null();
  f.get_float("temperature", 0.0, 2.0, &p.temperature);
  f.get_float("top_p", 0.0, 1.0, &p.top_p);
  if (!f.error && p.top_p <= 0.0f) f.fail("top_p", "'top_p' must be greater than 0 and at most 1");
  f.get_int("top_k", -1, kMaxInt, &p.top_k);
  if (p.top_k < 0) p.top_k = 0;  // vLLM spells "off" as -1
  f.get_float("min_p", 0.0, 1.0, &p.min_p);
  f.get_float("presence_penalty", -2.0, 2.0, &p.presence_penalty);
  f.get_float("frequency_penalty", -2.0, 2.0, &p.frequency_penalty);
  f.get_float("repetition_penalty", 0.01, 10.0, &p.repetition_penalty);
  f.get_int("n", 1, kMaxN, &r.n);
  if (f.take("seed")) {
    f.get_int("seed", std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), &seed);
    p.seed = static_cast<uint64_t>(seed);
  }
  parse_stop(f, &p.stop);
  if (const json::value* ids = f.take("stop_token_ids")) {
    if (!ids->is_array()) {
      f.fail("stop_token_ids", "'stop_token_ids' must be an array of token ids");
    } else {
      read_token_ids(f, "stop_token_ids", "stop_token_ids", ids->as_array(), n_vocab, &p.stop_token_ids);
    }
  }
  f.get_bool("ignore_eos", &p.ignore_eos);
  parse_logit_bias(f, &p.logit_bias);
  f.get_bool("stream", &r.stream);
  parse_stream_options(f, r.stream, &r.include_usage, &r.continuous_usage);
  std::string user;
  f.get_string("user", &user);
  f.get_int("priority", std::numeric_limits<int>::min(), kMaxInt, &r.priority);
  std::string cache_salt;
  if (f.take("cache_salt") && f.get_string("cache_salt", &cache_salt)) {
    if (cache_salt.empty()) f.fail("cache_salt", "'cache_salt' must be a non-empty string");
    r.cache_key = engine::cache_key_for_salt(cache_salt);
  }
  if (chat) {
    bool logprobs = false;
    int top_logprobs = -1;
    bool parallel_tool_calls = true;
    f.get_bool("logprobs", &logprobs);
    f.get_int("top_logprobs", 0, kMaxLogprobs, &top_logprobs);
    if (!f.error && top_logprobs >= 0 && !logprobs) {
      f.fail("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
    }
    p.logprobs = logprobs ? std::max(top_logprobs, 0) : -1;
    parse_response_format(f, &r);
    f.get_bool("parallel_tool_calls", &parallel_tool_calls);
    r.parallel_tool_calls = parallel_tool_calls;
    parse_tools(f, &r);
    f.unsupported_unless("functions", json::array(), "; use 'tools'");
  } else {
    f.get_int("logprobs", 0, kMaxLogprobs, &p.logprobs);
    f.unsupported_unless("echo", json::value(false), "; send echo: false");
    f.unsupported_unless("suffix", json::string(""), "");
    int best_of = r.n;
    f.get_int("best_of", 1, kMaxN, &best_of);
    if (!f.error && best_of != r.n) f.fail("best_of", "'best_of' is not supported yet unless it equals 'n'");
  }
  if (!chat) parse_response_format(f, &r);
  parse_guided(f, &r);
  f.no_unknown_fields();
  return f.error;
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, TokenizeRequest* out) {
  json::value root;
  if (auto e = parse_object(body, &root)) return e;
  FieldReader f(root.as_object());
  std::string model;
  f.get_string("model", &model);
  if (root.as_object().contains("messages")) {
    out->is_chat = true;
    parse_messages(f, &out->messages);
    f.get_bool("add_generation_prompt", &out->add_generation_prompt);
    GenerateRequest tools;  // the same checks as a chat completion's tools
    if (root.as_object().contains("tools") && parse_tools(f, &tools)) out->tools_json = std::move(tools.tools_json);
  } else if (!f.take("prompt")) {
    f.fail("prompt", "'prompt' (a string) or 'messages' is required");
  }
  f.get_string("prompt", &out->prompt);
  f.get_bool("add_special_tokens", &out->add_special_tokens);
  f.no_unknown_fields();
  return f.error;
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, int32_t n_vocab, std::vector<int32_t>* out) {
  json::value root;
  if (auto e = parse_object(body, &root)) return e;
  FieldReader f(root.as_object());
  std::string model;
  f.get_string("model", &model);
  const json::value* tokens = f.take("tokens");
  if (!tokens || !tokens->is_array() || !parse_token_ids(tokens->as_array(), out)) {
    f.fail("tokens", "'tokens' must be an array of token ids");
  }
  for (int32_t id : *out) {
    if (id >= n_vocab) {
      f.fail("tokens", fmt::format("token id {} is outside the vocabulary [0, {})", id, n_vocab));
      break;
    }
  }
  f.no_unknown_fields();
  return f.error;
}

std::optional<ApiError> parse_lora_adapter_request(std::string_view body, bool load, LoraAdapterRequest* out) {
  json::value root;
  if (auto e = parse_object(body, &root)) return e;
  FieldReader f(root.as_object());
  f.get_string("lora_name", &out->name);
  if (out->name.empty()) f.fail("lora_name", "'lora_name' must be a non-empty string: the adapter's model name");
  if (load) {
    f.get_string("lora_path", &out->path);
    if (out->path.empty()) f.fail("lora_path", "'lora_path' must be a non-empty string: a PEFT adapter directory");
  }
  f.no_unknown_fields();
  return f.error;
}

namespace {

json::value finish_reason_json(const ChoiceOutput& c) {
  if (c.finish_reason == engine::FinishReason::kNone) return nullptr;
  if (c.called_tools && c.finish_reason == engine::FinishReason::kStop) return "tool_calls";
  return json::string(engine::finish_reason_name(c.finish_reason));
}

json::array tool_calls_json(std::span<const ToolCall> calls) {
  json::array out;
  for (const ToolCall& c : calls) {
    out.push_back(json::object{{"id", c.id},
                               {"type", "function"},
                               {"function", json::object{{"name", c.name}, {"arguments", c.arguments}}}});
  }
  return out;
}

// OpenAI's streamed tool-call deltas: the first of a call has its id, type and name.
json::array tool_call_deltas_json(std::span<const ToolCallDelta> deltas) {
  json::array out;
  for (const ToolCallDelta& d : deltas) {
    json::object fn{{"arguments", d.arguments}};
    json::object o{{"index", d.index}};
    if (!d.id.empty()) {
      o["id"] = d.id;
      o["type"] = "function";
      fn["name"] = d.name;
    }
    o["function"] = std::move(fn);
    out.push_back(std::move(o));
  }
  return out;
}

// The text of one token as it reads mid-sequence (a SentencePiece "▁the" is " the"): a
// normal token as its own predecessor is never at the start of text.
std::string token_piece(const tokenizer::Tokenizer& tok, int32_t id) {
  std::string out;
  tok.append_piece(id, /*prev=*/id, /*skip_special=*/false, &out);
  return out;
}

json::array bytes_json(const std::string& s) {
  json::array out;
  for (unsigned char c : s) out.push_back(c);
  return out;
}

// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
json::object completion_logprobs(std::span<const engine::SampledToken> tokens, size_t text_offset,
                                 const tokenizer::Tokenizer& tok) {
  json::array texts, lps, tops, offsets;
  for (const auto& t : tokens) {
    std::string text = token_piece(tok, t.token);
    offsets.push_back(text_offset);
    text_offset += text.size();
    texts.push_back(json::string(text));
    lps.push_back(t.logprob);
    json::object top;
    for (const auto& alt : t.top_logprobs) {
      top[token_piece(tok, alt.token)] = alt.logprob;
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(texts)}, {"token_logprobs", std::move(lps)}, {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [...]}]}.
json::object chat_logprobs(std::span<const engine::SampledToken> tokens, const tokenizer::Tokenizer& tok) {
  auto entry = [&](int32_t id, float logprob) {
    std::string text = token_piece(tok, id);
    return json::object{{"token", text}, {"logprob", logprob}, {"bytes", bytes_json(text)}};
  };
  json::array content;
  for (const auto& t : tokens) {
    json::object e = entry(t.token, t.logprob);
    json::array top;
    for (const auto& alt : t.top_logprobs) top.push_back(entry(alt.token, alt.logprob));
    e["top_logprobs"] = std::move(top);
    content.push_back(std::move(e));
  }
  return {{"content", std::move(content)}};
}

json::value logprobs_json(const ResponseMeta& meta, const ChoiceOutput& c, bool wanted, size_t text_offset,
                          const tokenizer::Tokenizer& tok) {
  if (!wanted) return nullptr;
  if (meta.kind == ApiKind::kChat) return chat_logprobs(c.logprobs, tok);
  return completion_logprobs(c.logprobs, text_offset, tok);
}

json::object envelope(const ResponseMeta& meta, bool chunk) {
  const char* object = meta.kind == ApiKind::kChat ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                                    : "text_completion";
  return {{"id", meta.id}, {"object", object}, {"created", meta.created}, {"model", meta.model}};
}

}  // namespace

json::object usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens},
          {"prompt_tokens_details", json::object{{"cached_tokens", u.cached_tokens}}}};
}

json::object full_response(const ResponseMeta& meta, std::span<const ChoiceOutput> choices, const Usage& usage,
                           const tokenizer::Tokenizer& tok) {
  json::object out = envelope(meta, false);
  json::array arr;
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceOutput& c = choices[i];
    const bool wanted = !c.logprobs.empty();
    json::object choice{{"index", i}};
    if (meta.kind == ApiKind::kChat) {
      json::object message{{"role", "assistant"}, {"content", c.text}};
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) message["content"] = nullptr;
        message["tool_calls"] = tool_calls_json(c.tool_calls);
      }
      choice["message"] = std::move(message);
    } else {
      choice["text"] = c.text;
    }
    choice["logprobs"] = logprobs_json(meta, c, wanted, 0, tok);
    choice["finish_reason"] = finish_reason_json(c);
    arr.push_back(std::move(choice));
  }
  out["choices"] = std::move(arr);
  out["usage"] = usage_json(usage);
  return out;
}

json::object stream_chunk(const ResponseMeta& meta, int index, const ChoiceOutput& delta, bool first,
                          size_t text_offset, const tokenizer::Tokenizer& tok) {
  json::object out = envelope(meta, true);
  json::object choice{{"index", index}};
  if (meta.kind == ApiKind::kChat) {
    json::object d;
    if (first) d["role"] = "assistant";
    if (delta.tool_call_deltas.empty() && !(delta.called_tools && delta.text.empty())) {
      d["content"] = delta.text;
    } else if (!delta.tool_call_deltas.empty()) {
      if (!delta.text.empty() || first) d["content"] = delta.text.empty() ? json::value(nullptr) : json::value(delta.text);
      d["tool_calls"] = tool_call_deltas_json(delta.tool_call_deltas);
    }
    choice["delta"] = std::move(d);
  } else {
    choice["text"] = delta.text;
  }
  choice["logprobs"] = logprobs_json(meta, delta, !delta.logprobs.empty(), text_offset, tok);
  choice["finish_reason"] = finish_reason_json(delta);
  out["choices"] = json::array{std::move(choice)};
  return out;
}

json::object usage_chunk(const ResponseMeta& meta, const Usage& usage) {
  json::object out = envelope(meta, true);
  out["choices"] = json::array();
  out["usage"] = usage_json(usage);
  return out;
}

}  // namespace koi::serve
