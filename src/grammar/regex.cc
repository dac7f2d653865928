#include "grammar/regex.h"

#include <fmt/format.h>

namespace koi::grammar {

uint32_t decode_utf8(std::string_view s, size_t* i) {
  const auto c = static_cast<unsigned char>(s[*i]);
  int len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
  if (len == 0 || *i + static_cast<size_t>(len) > s.size()) {
    ++*i;
    return 0xFFFD;
  }
  uint32_t cp = len == 1 ? c : len == 2 ? (c & 0x1F) : len == 3 ? (c & 0x0F) : (c & 0x07);
  for (int k = 1; k < len; ++k) {
    const auto cc = static_cast<unsigned char>(s[*i + static_cast<size_t>(k)]);
    if ((cc >> 6) != 2) {
      ++*i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (cc & 0x3F);
  }
  *i += static_cast<size_t>(len);
  return cp;
}

namespace {

const CodepointSet kDigits = {{'0', '9'}};
const CodepointSet kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodepointSet kSpace = {{'\t', '\r'}, {' ', ' '}, {0xA0, 0xA0}, {0x1680, 0x1680}, {0x2000, 0x200A},
                             {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000},
                             {0xFEFF, 0xFEFF}};
// Negated shorthands stay within printable ASCII: ECMAScript and Python disagree on which
// other characters are digits, word characters or spaces, and a grammar must satisfy both.
const CodepointSet kPrintable = {{0x20, 0x7E}};

CodepointSet minus(const CodepointSet& a, const CodepointSet& b) {
  CodepointSet out;
  const CodepointSet nb = complement(b);
  for (CodepointRange x : normalize(a)) {
    for (CodepointRange y : nb) {
      const uint32_t lo = std::max(x.lo, y.lo), hi = std::min(x.hi, y.hi);
      if (lo <= hi) out.push_back({lo, hi});
    }
  }
  return normalize(out);
}

class RegexParser {
 public:
  RegexParser(GrammarBuilder& b, std::string_view p, const RegexOptions& o) : b_(b), p_(p), o_(o) {}

  Result<Element> parse() {
    bool anchored_start = false, anchored_end = false;
    std::string_view body = p_;
    if (body.starts_with('^')) {
      anchored_start = true;
      body.remove_prefix(1);
    }
    if (body.ends_with('$') && !ends_escaped(body)) {
      anchored_end = true;
      body.remove_suffix(1);
    }
    p_ = body;
    int num_alternatives = 0;
    KOI_ASSIGN_OR_RETURN(Element e, alternation(&num_alternatives));
    if (i_ < p_.size()) return error(fmt::format("unexpected '{}'", p_[i_]));
    if (num_alternatives > 1 && (anchored_start || anchored_end) && o_.search) {
      return error("^ or $ around a top-level '|' is ambiguous here; wrap the alternatives in a group: ^(a|b)$");
    }
    Sequence seq;
    const bool any_prefix = o_.search && !anchored_start, any_suffix = o_.search && !anchored_end;
    Element any{};
    if (any_prefix || any_suffix) {
      KOI_ASSIGN_OR_RETURN(any, b_.repeat("regex-any", {b_.codepoints({{0, 0x10FFFF}}, o_.json_string)}, 0, -1));
    }
    if (any_prefix) seq.push_back(any);
    seq.push_back(e);
    if (any_suffix) seq.push_back(any);
    return b_.choice("regex", {std::move(seq)});
  }

 private:
  static bool ends_escaped(std::string_view s) {
    size_t n = 0;
    for (size_t k = s.size() - 1; k-- > 0 && s[k] == '\\';) ++n;
    return n % 2 == 1;
  }
  Status error(std::string what) const {
    return Status::invalid_argument(fmt::format("regex '{}': {} at offset {}", original(), what, i_));
  }
  std::string original() const { return std::string(p_); }
  bool at(char c) const { return i_ < p_.size() && p_[i_] == c; }

  Result<Element> alternation(int* count) {
    std::vector<Sequence> alts;
    for (;;) {
      KOI_ASSIGN_OR_RETURN(Sequence s, concat());
      alts.push_back(std::move(s));
      if (!at('|')) break;
      ++i_;
    }
    *count = static_cast<int>(alts.size());
    return b_.choice("regex-alt", std::move(alts));
  }

  Result<Sequence> concat() {
    Sequence seq;
    while (i_ < p_.size() && !at('|') && !at(')')) {
      KOI_ASSIGN_OR_RETURN(Sequence atom_seq, atom());
      KOI_ASSIGN_OR_RETURN(Sequence quantified, quantifiers(std::move(atom_seq)));
      seq.insert(seq.end(), quantified.begin(), quantified.end());
    }
    return seq;
  }

  Result<Sequence> quantifiers(Sequence atom_seq) {
    while (i_ < p_.size()) {
      int min = 0, max = -1;
      const char c = p_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{' && bounds(&min, &max)) {
      } else {
        break;
      }
      if (at('?')) ++i_;  // lazy: the same language
      KOI_ASSIGN_OR_RETURN(Element rep, b_.repeat("regex-rep", atom_seq, min, max));
      atom_seq = {rep};
    }
    return atom_seq;
  }

  // {n}, {n,}, {n,m}; false (nothing consumed) when the brace is a literal.
  bool bounds(int* min, int* max) {
    size_t j = i_ + 1;
    auto number = [&](int* out) {
      const size_t start = j;
      int64_t v = 0;
      while (j < p_.size() && p_[j] >= '0' && p_[j] <= '9' && v < 1000000) v = v * 10 + (p_[j++] - '0');
      *out = static_cast<int>(v);
      return j > start;
    };
    if (!number(min)) return false;
    *max = *min;
    if (j < p_.size() && p_[j] == ',') {
      ++j;
      if (!number(max)) *max = -1;
    }
    if (j >= p_.size() || p_[j] != '}') return false;
    i_ = j + 1;
    return true;
  }

  Element set_element(const CodepointSet& set) { return b_.codepoints(set, o_.json_string); }

  Result<Sequence> atom() {
    const char c = p_[i_];
    if (c == '(') {
      if (++depth_ > kMaxDepth) return error(fmt::format("groups nest deeper than {}", kMaxDepth));
      ++i_;
      if (at('?')) {
        if (i_ + 1 < p_.size() && p_[i_ + 1] == ':') {
          i_ += 2;
        } else {
          return error("lookaround, named groups and inline flags '(?' are not supported; use (?:...) or (...)");
        }
      }
      int n = 0;
      KOI_ASSIGN_OR_RETURN(Element e, alternation(&n));
      if (!at(')')) return error("missing ')'");
      ++i_;
      --depth_;
      return Sequence{e};
    }
    if (c == '[') {
      KOI_ASSIGN_OR_RETURN(CodepointSet set, char_class());
      if (normalize(set).empty()) return error("the class matches no character");
      return Sequence{set_element(set)};
    }
    if (c == '.') {
      ++i_;
      return Sequence{set_element(complement({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}))};
    }
    if (c == '^' || c == '$') return error(fmt::format("'{}' is supported only at the start or end of the pattern", c));
    if (c == '*' || c == '+' || c == '?') return error(fmt::format("nothing to repeat before '{}'", c));
    if (c == ')') return error("unmatched ')'");
    CodepointSet set;
    KOI_RETURN_IF_ERROR(escape_or_char(/*in_class=*/false, &set));
    return Sequence{set_element(set)};
  }

  // One character or escape at i_, as a set.
  Status escape_or_char(bool in_class, CodepointSet* out) {
    if (p_[i_] != '\\') {
      const uint32_t cp = decode_utf8(p_, &i_);
      *out = {{cp, cp}};
      return ok_status();
    }
    ++i_;
    if (i_ >= p_.size()) return error("a pattern cannot end with '\\'");
    const char e = p_[i_++];
    auto one = [&](uint32_t cp) { *out = {{cp, cp}}; };
    switch (e) {
      case 'd': *out = kDigits; break;
      case 'w': *out = kWord; break;
      case 's': *out = kSpace; break;
      case 'D': *out = minus(kPrintable, kDigits); break;
      case 'W': *out = minus(kPrintable, kWord); break;
      case 'S': *out = minus(kPrintable, kSpace); break;
      case 'n': one('\n'); break;
      case 't': one('\t'); break;
      case 'r': one('\r'); break;
      case 'f': one('\f'); break;
      case 'v': one('\v'); break;
      case '0': one(0); break;
      case 'x': {
        uint32_t cp = 0;
        KOI_RETURN_IF_ERROR(hex(2, &cp));
        one(cp);
        break;
      }
      case 'u': {
        uint32_t cp = 0;
        if (at('{')) {
          const size_t close = p_.find('}', i_);
          if (close == std::string_view::npos) return error("missing '}' in \\u{...}");
          ++i_;
          KOI_RETURN_IF_ERROR(hex(static_cast<int>(close - i_), &cp));
          ++i_;
        } else {
          KOI_RETURN_IF_ERROR(hex(4, &cp));
        }
        one(cp);
        break;
      }
      case 'b':
        if (in_class) {
          one('\b');
          break;
        }
        [[fallthrough]];
      case 'B': return error("word boundaries (\\b, \\B) are not supported");
      default:
        if (e >= '1' && e <= '9') return error("backreferences are not supported");
        if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) {
          return error(fmt::format("the escape '\\{}' is not supported", e));
        }
        one(static_cast<unsigned char>(e));
    }
    return ok_status();
  }

  Status hex(int digits, uint32_t* out) {
    if (digits <= 0 || digits > 6 || i_ + static_cast<size_t>(digits) > p_.size()) return error("bad hex escape");
    *out = 0;
    for (int k = 0; k < digits; ++k) {
      const char h = p_[i_++];
      const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
      if (v < 0) return error("bad hex digit");
      *out = *out * 16 + static_cast<uint32_t>(v);
    }
    return ok_status();
  }

  Result<CodepointSet> char_class() {
    ++i_;  // [
    bool negated = false;
    if (at('^')) {
      negated = true;
      ++i_;
    }
    CodepointSet set;
    bool first = true;
    while (i_ < p_.size() && (first || !at(']'))) {
      first = false;
      CodepointSet lo;
      KOI_RETURN_IF_ERROR(escape_or_char(/*in_class=*/true, &lo));
      if (at('-') && i_ + 1 < p_.size() && p_[i_ + 1] != ']' && lo.size() == 1 && lo[0].lo == lo[0].hi) {
        ++i_;
        CodepointSet hi;
        KOI_RETURN_IF_ERROR(escape_or_char(/*in_class=*/true, &hi));
        if (hi.size() != 1 || hi[0].lo != hi[0].hi || hi[0].lo < lo[0].lo) return error("bad range in class");
        set.push_back({lo[0].lo, hi[0].lo});
      } else {
        set.insert(set.end(), lo.begin(), lo.end());
      }
    }
    if (!at(']')) return error("missing ']'");
    ++i_;
    return negated ? complement(set) : normalize(set);
  }

  static constexpr int kMaxDepth = 200;  // the parser recurses per group

  GrammarBuilder& b_;
  std::string_view p_;
  const RegexOptions& o_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Result<Element> compile_regex(GrammarBuilder& b, std::string_view pattern, const RegexOptions& options) {
  RegexParser parser(b, pattern, options);
  return parser.parse();
}

Result<Grammar> regex_grammar(std::string_view pattern) {
  GrammarBuilder b;
  const int32_t root = b.new_rule("root");
  KOI_ASSIGN_OR_RETURN(Element e, compile_regex(b, pattern, {}));
  b.add_alternative(root, {e});
  return std::move(b).build(root);
}

}  // namespace koi::grammar
