#include "serve/tool_calls.h"

#include <optional>
#include <regex>

#include <boost/json.hpp>
#include <fmt/format.h>

namespace koi::serve {

namespace json = boost::json;

namespace {

constexpr std::string_view kOpen = "<tool_call>";
constexpr std::string_view kClose = "</tool_call>";
constexpr std::string_view kPythonTag = "<|python_tag|>";

const std::regex& header_regex() {
  static const std::regex re(R"re(^\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*)re");
  return re;
}

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

struct Header {
  std::string name;
  size_t end = 0;  // where the arguments start
};

std::optional<Header> parse_header(std::string_view text) {
  std::match_results<std::string_view::const_iterator> m;
  if (!std::regex_search(text.begin(), text.end(), m, header_regex())) return std::nullopt;
  boost::system::error_code ec;
  const json::value name = json::parse(m[1].str(), ec);
  if (ec || !name.is_string()) return std::nullopt;
  return Header{std::string(name.as_string()), static_cast<size_t>(m[0].length())};
}

// {"name": ..., "arguments": {...}}: the name and the arguments' JSON text as written.
std::optional<ToolCall> parse_call_body(std::string_view body) {
  auto header = parse_header(body);
  if (!header) return std::nullopt;
  const std::string_view trimmed = trim(body);
  boost::system::error_code ec;
  const json::value whole = json::parse(trimmed, ec);
  if (ec || !whole.is_object()) return std::nullopt;
  const size_t close = body.rfind('}');
  if (close == std::string_view::npos || close < header->end) return std::nullopt;
  const std::string_view args = trim(body.substr(header->end, close - header->end));
  const json::value parsed_args = json::parse(args, ec);
  if (ec || !parsed_args.is_object()) return std::nullopt;
  return ToolCall{"", header->name, std::string(args)};
}

// The longest suffix of `s` that is a proper prefix of `marker`.
size_t partial_marker(std::string_view s, std::string_view marker) {
  for (size_t n = std::min(s.size(), marker.size() - 1); n > 0; --n) {
    if (s.substr(s.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

std::string call_id(const std::string& prefix, int index) { return fmt::format("{}_{}", prefix, index); }

}  // namespace

ToolFormat detect_tool_format(std::string_view source) {
  if (source.find(kOpen) != std::string_view::npos) return ToolFormat::kHermes;
  if (source.find(kPythonTag) != std::string_view::npos) return ToolFormat::kLlama3Json;
  return ToolFormat::kHermes;
}

grammar::Constraint forced_tool_call(const std::vector<Tool>& tools, ToolFormat format) {
  json::array list;
  for (const Tool& t : tools) {
    json::object o{{"name", t.name}};
    if (!t.parameters_json.empty()) o["parameters"] = json::parse(t.parameters_json);
    list.push_back(std::move(o));
  }
  const bool hermes = format == ToolFormat::kHermes;
  json::object spec{{"prefix", hermes ? "<tool_call>\n" : ""},
                    {"key", hermes ? "arguments" : "parameters"},
                    {"suffix", hermes ? "\n</tool_call>" : ""},
                    {"tools", std::move(list)}};
  return {grammar::ConstraintKind::kToolCall, json::serialize(spec), {}};
}

ParsedOutput parse_tool_calls(std::string_view text, ToolFormat format, const std::string& id_prefix) {
  ParsedOutput out;
  if (format == ToolFormat::kLlama3Json) {
    std::string_view body = trim(text);
    if (body.starts_with(kPythonTag)) body.remove_prefix(kPythonTag.size());
    if (auto call = parse_call_body(body)) {
      call->id = call_id(id_prefix, 0);
      out.calls.push_back(std::move(*call));
    } else {
      out.content = std::string(text);
    }
    return out;
  }
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t open = text.find(kOpen, pos);
    if (open == std::string_view::npos) break;
    out.content += text.substr(pos, open - pos);
    const size_t body_begin = open + kOpen.size();
    const size_t close = text.find(kClose, body_begin);
    const size_t body_end = close == std::string_view::npos ? text.size() : close;
    const std::string_view body = text.substr(body_begin, body_end - body_begin);
    pos = close == std::string_view::npos ? text.size() : close + kClose.size();
    if (auto call = parse_call_body(body)) {
      call->id = call_id(id_prefix, static_cast<int>(out.calls.size()));
      out.calls.push_back(std::move(*call));
    } else {
      out.content += text.substr(open, pos - open);
    }
  }
  if (pos < text.size()) out.content += text.substr(pos);
  if (!out.calls.empty()) out.content = std::string(trim(out.content));
  return out;
}

StreamDelta ToolCallStreamer::push(std::string_view text) {
  buffer_ += text;
  StreamDelta out;
  scan(&out, /*at_end=*/false);
  return out;
}

StreamDelta ToolCallStreamer::finish() {
  StreamDelta out;
  scan(&out, /*at_end=*/true);
  return out;
}

void ToolCallStreamer::start_call() {
  in_call_ = true;
  header_sent_ = false;
  args_begin_ = 0;
  args_sent_ = 0;
}

void ToolCallStreamer::scan(StreamDelta* out, bool at_end) {
  for (;;) {
    if (!in_call_) {
      if (format_ == ToolFormat::kLlama3Json) {
        if (!decided_) {
          const std::string_view t = trim(buffer_);
          const bool maybe_tag = kPythonTag.starts_with(t) && t.size() < kPythonTag.size();
          if (!at_end && (t.empty() || maybe_tag)) return;  // not known yet
          decided_ = true;
          if (t.starts_with('{') || t.starts_with(kPythonTag)) {
            std::string_view rest = std::string_view(buffer_).substr(buffer_.find(t.front()));
            if (rest.starts_with(kPythonTag)) rest.remove_prefix(kPythonTag.size());
            buffer_ = std::string(rest);
            start_call();
            continue;
          }
        }
        out->content += buffer_;
        buffer_.clear();
        return;
      }
      const size_t open = buffer_.find(kOpen);
      if (open != std::string::npos) {
        out->content += buffer_.substr(0, open);
        buffer_.erase(0, open + kOpen.size());
        start_call();
        continue;
      }
      const size_t keep = at_end ? 0 : partial_marker(buffer_, kOpen);
      out->content += buffer_.substr(0, buffer_.size() - keep);
      buffer_.erase(0, buffer_.size() - keep);
      return;
    }
    if (format_ == ToolFormat::kHermes) {
      const size_t close = buffer_.find(kClose);
      if (close != std::string::npos) {
        end_call(std::string_view(buffer_).substr(0, close), out);
        buffer_.erase(0, close + kClose.size());
        in_call_ = false;
        continue;
      }
    }
    if (at_end) {
      end_call(buffer_, out);
      buffer_.clear();
      in_call_ = false;
      return;
    }
    stream_arguments(out);
    return;
  }
}

bool ToolCallStreamer::stream_arguments(StreamDelta* out) {
  if (!header_sent_) {
    auto header = parse_header(buffer_);
    // The arguments must have begun, so that the spaces before them are behind the header.
    if (!header || header->end >= buffer_.size()) return false;
    out->calls.push_back({num_calls_, call_id(id_prefix_, num_calls_), header->name, ""});
    header_sent_ = true;
    args_begin_ = header->end;
  }
  // Held back: what may be the call's own closing brace — a last '}' with only spaces (and
  // the start of </tool_call>) after it — and trailing spaces; the rest is arguments.
  size_t end = buffer_.size();
  if (format_ == ToolFormat::kHermes) end -= partial_marker(buffer_, kClose);
  auto skip_spaces = [&] {
    while (end > args_begin_ && is_space(buffer_[end - 1])) --end;
  };
  skip_spaces();
  if (end > args_begin_ && buffer_[end - 1] == '}') --end;
  skip_spaces();
  if (end <= args_begin_) return true;
  if (end - args_begin_ > args_sent_) {
    out->calls.push_back({num_calls_, "", "", buffer_.substr(args_begin_ + args_sent_, end - args_begin_ - args_sent_)});
    args_sent_ = end - args_begin_;
  }
  return true;
}

void ToolCallStreamer::end_call(std::string_view body, StreamDelta* out) {
  auto call = parse_call_body(body);
  if (!call) {
    // Not a call after all: the text is content (a call already announced stays as it is).
    if (!header_sent_) out->content += (format_ == ToolFormat::kHermes ? std::string(kOpen) : "") + std::string(body);
    if (header_sent_) ++num_calls_;
    return;
  }
  if (!header_sent_) out->calls.push_back({num_calls_, call_id(id_prefix_, num_calls_), call->name, ""});
  if (call->arguments.size() > args_sent_) {
    out->calls.push_back({num_calls_, "", "", call->arguments.substr(args_sent_)});
  }
  ++num_calls_;
}

}  // namespace koi::serve
