#include "tokenizer/jinja/lexer.h"

#include <cctype>

#include "tokenizer/jinja/value.h"

namespace koi::tokenizer::jinja {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

std::string_view rstrip(std::string_view s) {
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

Status error_at(std::string_view source, size_t pos, const std::string& message) {
  return Status::invalid_argument(line_col(source, pos) + ": " + message);
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Python's "unicode-escape" decoding of a string literal's body; unknown escapes stay as
// written (a backslash and the character).
std::string unescape(std::string_view body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    if (body[i] != '\\' || i + 1 == body.size()) {
      out += body[i];
      continue;
    }
    char c = body[++i];
    switch (c) {
      case 'n': out += '\n'; break;
      case 't': out += '\t'; break;
      case 'r': out += '\r'; break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'v': out += '\v'; break;
      case '\n': break;  // a backslash-newline continues the line
      case 'x':
      case 'u':
      case 'U': {
        size_t digits = c == 'x' ? 2 : c == 'u' ? 4 : 8;
        char32_t cp = 0;
        bool ok = i + digits < body.size();
        for (size_t k = 1; ok && k <= digits; ++k) {
          int h = hex_value(body[i + k]);
          ok = h >= 0;
          cp = cp * 16 + static_cast<char32_t>(h);
        }
        if (!ok || cp > 0x10ffff) {
          out += '\\';
          out += c;
          break;
        }
        append_utf8(cp, &out);
        i += digits;
        break;
      }
      default:
        if (c >= '0' && c <= '7') {
          char32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k) {
            cp = cp * 8 + static_cast<char32_t>(body[i + k] - '0');
          }
          append_utf8(cp, &out);
          i += k - 1;
        } else {
          out += '\\';
          out += c;
        }
    }
  }
  return out;
}

bool starts_with(std::string_view s, size_t pos, std::string_view prefix) {
  return s.substr(pos, prefix.size()) == prefix;
}

}  // namespace

std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out += source[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string line_col(std::string_view source, size_t pos) {
  size_t line = 1;
  size_t column = 1;
  for (size_t i = 0; i < pos && i < source.size(); ++i) {
    if (source[i] == '\n') {
      ++line;
      column = 1;
    } else if ((static_cast<unsigned char>(source[i]) & 0xc0) != 0x80) {
      ++column;
    }
  }
  return std::to_string(line) + ":" + std::to_string(column);
}

Result<std::vector<Token>> lex(std::string_view src) {
  std::vector<Token> tokens;
  size_t pos = 0;
  while (pos < src.size()) {
    // The next tag opener: {{, {% or {#.
    size_t tag = pos;
    for (; (tag = src.find('{', tag)) != std::string_view::npos; ++tag) {
      if (tag + 1 < src.size() && (src[tag + 1] == '{' || src[tag + 1] == '%' || src[tag + 1] == '#')) break;
    }
    if (tag == std::string_view::npos) {
      tokens.push_back({TokenKind::kText, std::string(src.substr(pos)), pos});
      break;
    }
    const char kind = src[tag + 1];
    size_t inner = tag + 2;
    const char sign = inner < src.size() && (src[inner] == '-' || src[inner] == '+') ? src[inner] : 0;
    if (sign != 0) ++inner;

    std::string_view text = src.substr(pos, tag - pos);
    if (sign == '-') {
      text = rstrip(text);
    } else if (sign != '+' && kind != '{') {
      // lstrip_blocks: drop the spaces between the start of the line and a block or comment.
      size_t line_start = text.rfind('\n');
      line_start = line_start == std::string_view::npos ? 0 : line_start + 1;
      bool at_line_start = line_start > 0 || pos == 0 || src[pos - 1] == '\n';
      std::string_view rest = text.substr(line_start);
      if (at_line_start && !rest.empty() && rstrip(rest).empty()) text = text.substr(0, line_start);
    }
    if (!text.empty()) tokens.push_back({TokenKind::kText, std::string(text), pos});

    if (kind == '#') {
      size_t close = src.find("#}", inner);
      if (close == std::string_view::npos) return error_at(src, tag, "unclosed comment: expected '#}'");
      char end_sign = close > inner ? src[close - 1] : 0;
      pos = close + 2;
      if (end_sign == '-') {
        while (pos < src.size() && is_space(src[pos])) ++pos;
      } else if (end_sign != '+' && pos < src.size() && src[pos] == '\n') {
        ++pos;  // trim_blocks
      }
      continue;
    }

    const bool is_block = kind == '%';
    tokens.push_back({is_block ? TokenKind::kBlockBegin : TokenKind::kVarBegin, is_block ? "{%" : "{{", tag});
    const std::string_view close = is_block ? "%}" : "}}";
    int brackets = 0;
    pos = inner;
    while (true) {
      while (pos < src.size() && is_space(src[pos])) ++pos;
      if (pos >= src.size()) {
        return error_at(src, tag, "unclosed tag: expected '" + std::string(close) + "' before the end of the template");
      }
      if (brackets == 0) {
        size_t end = std::string_view::npos;
        if (starts_with(src, pos, close)) {
          end = pos + 2;
          if (is_block && end < src.size() && src[end] == '\n') ++end;  // trim_blocks
        } else if (src[pos] == '-' && starts_with(src, pos + 1, close)) {
          end = pos + 3;
          while (end < src.size() && is_space(src[end])) ++end;
        } else if (is_block && src[pos] == '+' && starts_with(src, pos + 1, close)) {
          end = pos + 3;
        }
        if (end != std::string_view::npos) {
          tokens.push_back({is_block ? TokenKind::kBlockEnd : TokenKind::kVarEnd, std::string(close), pos});
          pos = end;
          break;
        }
      }
      const char c = src[pos];
      const size_t start = pos;
      if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        while (pos < src.size() && (std::isalnum(static_cast<unsigned char>(src[pos])) || src[pos] == '_')) ++pos;
        tokens.push_back({TokenKind::kName, std::string(src.substr(start, pos - start)), start});
      } else if (std::isdigit(static_cast<unsigned char>(c))) {
        auto digits = [&] {
          while (pos < src.size() && (std::isdigit(static_cast<unsigned char>(src[pos])) || src[pos] == '_')) ++pos;
        };
        digits();
        bool after_dot = !tokens.empty() && tokens.back().kind == TokenKind::kOp && tokens.back().text == ".";
        bool is_float = false;
        if (!after_dot && pos + 1 < src.size() && src[pos] == '.' && std::isdigit(static_cast<unsigned char>(src[pos + 1]))) {
          ++pos;
          digits();
          is_float = true;
        }
        if (!after_dot && pos < src.size() && (src[pos] == 'e' || src[pos] == 'E')) {
          size_t exp = pos + 1;
          if (exp < src.size() && (src[exp] == '+' || src[exp] == '-')) ++exp;
          if (exp < src.size() && std::isdigit(static_cast<unsigned char>(src[exp]))) {
            pos = exp;
            digits();
            is_float = true;
          }
        }
        std::string number;
        for (char d : src.substr(start, pos - start)) {
          if (d != '_') number += d;
        }
        tokens.push_back({is_float ? TokenKind::kFloat : TokenKind::kInt, number, start});
      } else if (c == '\'' || c == '"') {
        size_t end = pos + 1;
        while (end < src.size() && src[end] != c) end += src[end] == '\\' ? 2 : 1;
        if (end >= src.size()) return error_at(src, start, std::string("unterminated string: expected a closing ") + c);
        tokens.push_back({TokenKind::kString, unescape(src.substr(pos + 1, end - pos - 1)), start});
        pos = end + 1;
      } else {
        static constexpr std::string_view kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
        std::string op;
        for (std::string_view two : kTwoChar) {
          if (starts_with(src, pos, two)) op = two;
        }
        if (op.empty()) {
          if (std::string_view("+-*/%~<>=()[]{},.:|").find(c) == std::string_view::npos) {
            return error_at(src, pos, std::string("unexpected character '") + c + "' inside a tag");
          }
          op = std::string(1, c);
        }
        if (op == "(" || op == "[" || op == "{") ++brackets;
        if ((op == ")" || op == "]" || op == "}") && brackets > 0) --brackets;
        tokens.push_back({TokenKind::kOp, op, pos});
        pos += op.size();
      }
    }
  }
  tokens.push_back({TokenKind::kEof, "", src.size()});
  return tokens;
}

}  // namespace koi::tokenizer::jinja
