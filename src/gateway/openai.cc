#include "gateway/openai.h"

#include <algorithm>
#include <boost/json.hpp>
#include <climits>

#include "engine/block_hash.h"

namespace koi::gateway {

namespace json = boost::json;

Result<ParsedRequest> parse_request(std::string_view body, bool chat) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return Status::invalid_argument("the request body must be a JSON object");
  json::object& o = v.as_object();
  ParsedRequest r;
  const json::value* model = o.if_contains("model");
  if (!model || !model->is_string()) return Status::invalid_argument("'model' is required and must be a string");
  r.model = model->as_string();
  if (const json::value* s = o.if_contains("stream")) {
    if (!s->is_bool()) return Status::invalid_argument("'stream' must be true or false");
    r.stream = s->as_bool();
  }
  if (const json::value* salt = o.if_contains("cache_salt"); salt && salt->is_string()) {
    r.cache_key = engine::cache_key_for_salt(salt->as_string());
  }
  json::object tokenize{{"model", r.model}};
  if (chat) {
    const json::value* messages = o.if_contains("messages");
    if (!messages || !messages->is_array()) return Status::invalid_argument("'messages' is required and must be a list");
    for (const json::value& m : messages->as_array()) {
      const json::value* content = m.is_object() ? m.as_object().if_contains("content") : nullptr;
      if (content && content->is_string()) {
        r.prompt_text += content->as_string();
        r.prompt_text += '\n';
      }
    }
    tokenize["messages"] = *messages;
    tokenize["add_generation_prompt"] = true;
    // The engine renders the tools into the prompt (its chat template's `tools`): the same here.
    if (const json::value* tools = o.if_contains("tools")) tokenize["tools"] = *tools;
  } else {
    const json::value* prompt = o.if_contains("prompt");
    const bool ids = prompt && prompt->is_array() && !prompt->as_array().empty() &&
                     std::all_of(prompt->as_array().begin(), prompt->as_array().end(),
                                 [](const json::value& x) { return x.is_int64() && x.as_int64() >= 0 && x.as_int64() <= INT32_MAX; });
    if (!prompt || (!prompt->is_string() && !ids)) {
      return Status::invalid_argument("'prompt' is required and must be a string or a list of token ids");
    }
    if (ids) {
      for (const json::value& x : prompt->as_array()) r.prompt_tokens.push_back(static_cast<int32_t>(x.as_int64()));
    } else {
      r.prompt_text = prompt->as_string();
      tokenize["prompt"] = prompt->as_string();
    }
  }
  if (r.prompt_tokens.empty()) r.tokenize_body = json::serialize(tokenize);
  if (r.stream) {
    json::value& opts = o["stream_options"];
    if (!opts.is_object()) opts = json::object();
    if (const json::value* inc = opts.as_object().if_contains("include_usage"); inc && inc->is_bool()) {
      r.client_wants_usage = inc->as_bool();
    }
    if (const json::value* c = opts.as_object().if_contains("continuous_usage_stats"); c && c->is_bool()) {
      r.client_wants_continuous_usage = c->as_bool();
    }
    opts.as_object()["include_usage"] = true;
    opts.as_object()["continuous_usage_stats"] = true;
    r.upstream_body = json::serialize(v);
  } else {
    r.upstream_body = std::string(body);
  }
  return r;
}

int64_t estimate_tokens(std::string_view text) { return static_cast<int64_t>((text.size() + 3) / 4); }

int64_t estimate_tokens(const ParsedRequest& r) {
  return r.prompt_tokens.empty() ? estimate_tokens(r.prompt_text) : static_cast<int64_t>(r.prompt_tokens.size());
}

std::optional<Usage> parse_usage(std::string_view body) {
  json::error_code ec;
  json::value v = json::parse(body, ec);
  if (ec || !v.is_object()) return std::nullopt;
  const json::value* u = v.as_object().if_contains("usage");
  if (!u || !u->is_object()) return std::nullopt;
  const json::object& uo = u->as_object();
  auto num = [](const json::object& o, const char* k) -> int64_t {
    const json::value* x = o.if_contains(k);
    return x && x->is_int64() ? x->as_int64() : (x && x->is_uint64() ? static_cast<int64_t>(x->as_uint64()) : 0);
  };
  Usage usage;
  usage.prompt_tokens = num(uo, "prompt_tokens");
  usage.completion_tokens = num(uo, "completion_tokens");
  if (const json::value* d = uo.if_contains("prompt_tokens_details"); d && d->is_object()) {
    usage.cached_tokens = num(d->as_object(), "cached_tokens");
  }
  return usage;
}

std::string openai_error(std::string_view message, std::string_view type, int code) {
  json::object e{{"message", message}, {"type", type}, {"code", code}};
  return json::serialize(json::object{{"error", e}});
}

}  // namespace koi::gateway
