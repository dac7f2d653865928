#include "grammar/gbnf.h"

#include <set>

#include <fmt/format.h>

#include "grammar/regex.h"
#include "tokenizer/unicode.h"

namespace koi::grammar {

namespace {

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
}


class GbnfParser {
 public:
  explicit GbnfParser(std::string_view text) : t_(text) {}

  Result<Grammar> parse() {
    skip_space();
    if (i_ >= t_.size()) return error("the grammar is empty; define at least 'root ::= ...'");
    while (i_ < t_.size()) {
      const std::string name = read_name();
      if (name.empty()) return error("expected a rule name");
      skip_space();
      if (!t_.substr(i_).starts_with("::=")) return error(fmt::format("expected '::=' after '{}'", name));
      i_ += 3;
      const int32_t rule = b_.rule_named(name);
      if (b_.has_alternatives(rule) || defined_.count(name)) return error(fmt::format("rule '{}' is defined twice", name));
      defined_.insert(name);
      KOI_ASSIGN_OR_RETURN(std::vector<Sequence> alternatives, alternation(/*nested=*/false));
      for (Sequence& s : alternatives) b_.add_alternative(rule, std::move(s));
      skip_space();
    }
    if (!defined_.count("root")) return Status::invalid_argument("grammar: no rule named 'root'; the document is rule 'root'");
    const int32_t root = b_.rule_named("root");
    auto built = std::move(b_).build(root);
    if (!built.ok()) return built.status().with_prefix("grammar");
    return built;
  }

 private:
  Status error(std::string what) const {
    int line = 1, col = 1;
    for (size_t k = 0; k < i_ && k < t_.size(); ++k) {
      if (t_[k] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    return Status::invalid_argument(fmt::format("grammar: {} at line {}, column {}", what, line, col));
  }

  void skip_space() {
    while (i_ < t_.size()) {
      if (t_[i_] == '#') {
        while (i_ < t_.size() && t_[i_] != '\n') ++i_;
      } else if (t_[i_] == ' ' || t_[i_] == '\t' || t_[i_] == '\n' || t_[i_] == '\r') {
        ++i_;
      } else {
        break;
      }
    }
  }

  std::string read_name() {
    const size_t start = i_;
    while (i_ < t_.size() && is_name_char(t_[i_])) ++i_;
    return std::string(t_.substr(start, i_ - start));
  }

  // True when a `name ::=` starts at i_ (the end of the current rule).
  bool at_rule_start() {
    size_t j = i_;
    while (j < t_.size() && is_name_char(t_[j])) ++j;
    if (j == i_) return false;
    while (j < t_.size() && (t_[j] == ' ' || t_[j] == '\t' || t_[j] == '\n' || t_[j] == '\r')) ++j;
    return t_.substr(j).starts_with("::=");
  }

  Result<std::vector<Sequence>> alternation(bool nested) {
    std::vector<Sequence> alternatives;
    for (;;) {
      KOI_ASSIGN_OR_RETURN(Sequence s, sequence(nested));
      alternatives.push_back(std::move(s));
      skip_space();
      if (i_ < t_.size() && t_[i_] == '|') {
        ++i_;
        continue;
      }
      return alternatives;
    }
  }

  Result<Sequence> sequence(bool nested) {
    Sequence seq;
    for (;;) {
      skip_space();
      if (i_ >= t_.size() || t_[i_] == '|' || t_[i_] == ')' || at_rule_start()) break;
      KOI_ASSIGN_OR_RETURN(Sequence atom_seq, atom());
      KOI_ASSIGN_OR_RETURN(Sequence quantified, postfix(std::move(atom_seq)));
      seq.insert(seq.end(), quantified.begin(), quantified.end());
    }
    if (!nested && i_ < t_.size() && t_[i_] == ')') return error("unmatched ')'");
    return seq;
  }

  Result<Sequence> postfix(Sequence seq) {
    for (;;) {
      if (i_ >= t_.size()) return seq;
      int min = 0, max = -1;
      const char c = t_[i_];
      if (c == '*') {
        ++i_;
      } else if (c == '+') {
        min = 1;
        ++i_;
      } else if (c == '?') {
        max = 1;
        ++i_;
      } else if (c == '{') {
        const size_t close = t_.find('}', i_);
        if (close == std::string_view::npos) return error("missing '}'");
        const std::string inner(t_.substr(i_ + 1, close - i_ - 1));
        const size_t comma = inner.find(',');
        try {
          min = std::stoi(inner.substr(0, comma));
          max = comma == std::string::npos ? min
                : comma + 1 < inner.size() ? std::stoi(inner.substr(comma + 1))
                                           : -1;
        } catch (const std::exception&) {
          return error("bad repetition {m,n}");
        }
        i_ = close + 1;
      } else {
        return seq;
      }
      auto rep = b_.repeat("rep", seq, min, max);
      if (!rep.ok()) return error(rep.status().message());
      seq = {*rep};
    }
  }

  Result<Sequence> atom() {
    const char c = t_[i_];
    if (c == '"') return literal();
    if (c == '[') {
      const size_t start = i_;
      ++i_;
      if (i_ < t_.size() && t_[i_] == '^') ++i_;
      if (i_ < t_.size() && t_[i_] == ']') ++i_;
      while (i_ < t_.size() && t_[i_] != ']') i_ += t_[i_] == '\\' ? 2 : 1;
      if (i_ >= t_.size()) return error("missing ']'");
      ++i_;
      auto e = compile_regex(b_, t_.substr(start, i_ - start), {});
      if (!e.ok()) return error(e.status().message());
      return Sequence{*e};
    }
    if (c == '.') {
      ++i_;
      return Sequence{b_.codepoints({{0, 0x10FFFF}})};
    }
    if (c == '(') {
      if (++depth_ > kMaxDepth) return error(fmt::format("groups nest deeper than {}", kMaxDepth));
      ++i_;
      KOI_ASSIGN_OR_RETURN(std::vector<Sequence> alternatives, alternation(/*nested=*/true));
      skip_space();
      if (i_ >= t_.size() || t_[i_] != ')') return error("missing ')'");
      ++i_;
      --depth_;
      return Sequence{b_.choice("group", std::move(alternatives))};
    }
    if (is_name_char(c)) return Sequence{b_.rule(b_.rule_named(read_name()))};
    return error(fmt::format("unexpected '{}'", c));
  }

  Result<Sequence> literal() {
    ++i_;
    std::string bytes;
    while (i_ < t_.size() && t_[i_] != '"') {
      if (t_[i_] != '\\') {
        bytes += t_[i_++];
        continue;
      }
      if (++i_ >= t_.size()) break;
      const char e = t_[i_++];
      int hex_digits = 0;
      switch (e) {
        case 'n': bytes += '\n'; break;
        case 't': bytes += '\t'; break;
        case 'r': bytes += '\r'; break;
        case '\\': bytes += '\\'; break;
        case '"': bytes += '"'; break;
        case '[': bytes += '['; break;
        case ']': bytes += ']'; break;
        case 'x': hex_digits = 2; break;
        case 'u': hex_digits = 4; break;
        case 'U': hex_digits = 8; break;
        default: return error(fmt::format("unknown escape '\\{}' in a literal", e));
      }
      if (hex_digits) {
        if (i_ + static_cast<size_t>(hex_digits) > t_.size()) return error("bad hex escape");
        uint32_t cp = 0;
        for (int k = 0; k < hex_digits; ++k) {
          const char h = t_[i_++];
          const int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
          if (v < 0) return error("bad hex digit");
          cp = cp * 16 + static_cast<uint32_t>(v);
        }
        if (cp > 0x10FFFF) return error("code point beyond U+10FFFF");
        bytes += tokenizer::encode_utf8(cp);
      }
    }
    if (i_ >= t_.size()) return error("unterminated literal");
    ++i_;
    return b_.literal(bytes);
  }

  static constexpr int kMaxDepth = 200;  // the parser recurses per group

  std::string_view t_;
  size_t i_ = 0;
  int depth_ = 0;
  GrammarBuilder b_;
  std::set<std::string> defined_;
};

}  // namespace

Result<Grammar> parse_gbnf(std::string_view text) { return GbnfParser(text).parse(); }

Result<Grammar> choice_grammar(const std::vector<std::string>& choices) {
  if (choices.empty()) return Status::invalid_argument("the choice list is empty; give at least one string");
  GrammarBuilder b;
  const int32_t root = b.new_rule("root");
  for (const std::string& c : choices) {
    if (c.empty()) return Status::invalid_argument("a choice is empty; every choice must be a non-empty string");
    b.add_alternative(root, b.literal(c));
  }
  return std::move(b).build(root);
}

}  // namespace koi::grammar
