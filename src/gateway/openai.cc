#include "gateway/openai.h"

#include <boost/json.hpp>

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
  } else {
    const json::value* prompt = o.if_contains("prompt");
    if (!prompt || !prompt->is_string()) return Status::invalid_argument("'prompt' is required and must be a string");
    r.prompt_text = prompt->as_string();
  }
  if (r.stream) {
    json::value& opts = o["stream_options"];
    if (!opts.is_object()) opts = json::object();
    if (const json::value* inc = opts.as_object().if_contains("include_usage"); inc && inc->is_bool()) {
      r.client_wants_usage = inc->as_bool();
    }
    opts.as_object()["include_usage"] = true;
    r.upstream_body = json::serialize(v);
  } else {
    r.upstream_body = std::string(body);
  }
  return r;
}

int64_t estimate_tokens(std::string_view text) { return static_cast<int64_t>((text.size() + 3) / 4); }

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

std::vector<SseEvent> SseSplitter::feed(std::string_view bytes) {
  pending_.append(bytes);
  std::vector<SseEvent> out;
  size_t start = 0;
  for (size_t end; (end = pending_.find("\n\n", start)) != std::string::npos; start = end + 2) {
    SseEvent ev;
    ev.raw = pending_.substr(start, end + 2 - start);
    std::string_view text(ev.raw);
    for (size_t pos = 0; pos < text.size();) {
      size_t nl = text.find('\n', pos);
      std::string_view line = text.substr(pos, nl - pos);
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.starts_with("data:")) {
        line.remove_prefix(5);
        if (line.starts_with(' ')) line.remove_prefix(1);
        ev.data += line;
      }
      pos = nl + 1;
    }
    out.push_back(std::move(ev));
  }
  pending_.erase(0, start);
  return out;
}

std::string openai_error(std::string_view message, std::string_view type, int code) {
  json::object e{{"message", message}, {"type", type}, {"code", code}};
  return json::serialize(json::object{{"error", e}});
}

}  // namespace koi::gateway
