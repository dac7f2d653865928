#include <string>

#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

bool is_continuation(uint8_t b) { return (b & 0xC0) == 0x80; }

// Whether byte `index` (1..3) of a character that starts with `lead` may be `b`: a
// continuation byte, with the tighter second-byte ranges that rule out overlong forms,
// surrogates and code points past U+10FFFF.
bool valid_next(uint8_t lead, size_t index, uint8_t b) {
  if (!is_continuation(b)) return false;
  if (index != 1) return true;
  switch (lead) {
    case 0xE0: return b >= 0xA0;
    case 0xED: return b < 0xA0;
    case 0xF0: return b >= 0x90;
    case 0xF4: return b < 0x90;
    default: return true;
  }
}

// Moves the complete characters at the front of `pending` to the result, an invalid byte
// as U+FFFD. Leaves the bytes of a character that may still complete, unless `final`.
std::string take_complete(std::string* pending, bool final) {
  std::string out;
  const std::string& p = *pending;
  size_t pos = 0;
  while (pos < p.size()) {
    uint8_t lead = p[pos];
    size_t need = lead < 0x80 ? 1 : utf8_char_len(lead);
    if (lead >= 0x80 && need == 1) {  // a continuation byte or a byte no character starts with
      out += kReplacement;
      ++pos;
      continue;
    }
    size_t have = 1;
    while (have < need && pos + have < p.size() && valid_next(lead, have, p[pos + have])) ++have;
    if (have == need) {
      out.append(p, pos, need);
      pos += need;
    } else if (pos + have == p.size() && !final) {
      break;  // wait for the rest of the character
    } else {
      out += kReplacement;  // the maximal valid prefix of a character stands for one U+FFFD
      pos += have;
    }
  }
  pending->erase(0, pos);
  return out;
}

}  // namespace

std::string StreamDecoder::push(int32_t token) {
  tokenizer_->append_piece(token, prev_, skip_special_, &pending_);
  prev_ = token;
  return take_complete(&pending_, false);
}

std::string StreamDecoder::flush() { return take_complete(&pending_, true); }

}  // namespace koi::tokenizer
