#include "tokenizer/unicode.h"

#include <array>

namespace koi::tokenizer {
namespace {

// GPT-2 maps the printable bytes ('!'..'~', '¡'..'¬', '®'..'ÿ') to themselves and the
// other 68 bytes, in order, to U+0100 onwards.
struct ByteLevelTables {
  std::array<std::string, 256> to_unicode;
  std::array<int16_t, 0x200> from_codepoint;  // -1: not in the alphabet

  ByteLevelTables() {
    from_codepoint.fill(-1);
    uint32_t next = 256;
    for (uint32_t b = 0; b < 256; ++b) {
      bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      uint32_t cp = printable ? b : next++;
      to_unicode[b] = encode_utf8(cp);
      from_codepoint[cp] = static_cast<int16_t>(b);
    }
  }
};

const ByteLevelTables& tables() {
  static const ByteLevelTables t;
  return t;
}

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

std::string encode_utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

size_t utf8_piece_len(std::string_view text, size_t pos) {
  size_t len = 1;
  while (len < 4 && pos + len < text.size() && is_continuation(text[pos + len])) ++len;
  return len;
}

bool valid_utf8(std::string_view s) {
  for (size_t pos = 0; pos < s.size();) {
    const size_t len = utf8_char_len(uint8_t(s[pos]));
    if (uint8_t(s[pos]) >= 0x80 && len == 1) return false;  // a continuation byte first
    if (pos + len > s.size()) return false;
    for (size_t i = 1; i < len; ++i) {
      if (!is_continuation(uint8_t(s[pos + i]))) return false;
    }
    pos += len;
  }
  return true;
}

size_t utf8_char_len(uint8_t lead) {
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  return 1;
}

std::string_view byte_to_unicode(uint8_t byte) { return tables().to_unicode[byte]; }

void append_byte_level(std::string_view bytes, std::string* out) {
  for (char c : bytes) *out += byte_to_unicode(static_cast<uint8_t>(c));
}

void append_byte_level_decoded(std::string_view text, std::string* out) {
  const auto& from = tables().from_codepoint;
  size_t pos = 0;
  while (pos < text.size()) {
    uint8_t b0 = text[pos];
    int byte = -1;
    size_t len = 1;
    if (b0 < 0x80) {
      byte = from[b0];
    } else if ((b0 & 0xE0) == 0xC0 && pos + 1 < text.size() && is_continuation(text[pos + 1])) {
      uint32_t cp = ((b0 & 0x1F) << 6) | (text[pos + 1] & 0x3F);
      len = 2;
      if (cp < from.size()) byte = from[cp];
    }
    if (byte >= 0) {
      *out += static_cast<char>(byte);
    } else {
      out->append(text.substr(pos, len));
    }
    pos += len;
  }
}

std::string byte_token_text(uint8_t byte) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  return {'<', '0', 'x', kHex[byte >> 4], kHex[byte & 15], '>'};
}

int parse_byte_token(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return -1;
  int value = 0;
  for (char c : text.substr(3, 2)) {
    int digit;
    if (c >= '0' && c <= '9') {
      digit = c - '0';
    } else if (c >= 'A' && c <= 'F') {
      digit = c - 'A' + 10;
    } else if (c >= 'a' && c <= 'f') {
      digit = c - 'a' + 10;
    } else {
      return -1;
    }
    value = value * 16 + digit;
  }
  return value;
}

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (true) {
    size_t hit = text.find(from, pos);
    if (hit == std::string_view::npos) break;
    out.append(text.substr(pos, hit - pos));
    out.append(to);
    pos = hit + from.size();
  }
  out.append(text.substr(pos));
  return out;
}

}  // namespace koi::tokenizer
