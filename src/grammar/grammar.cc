#include "grammar/grammar.h"

#include <algorithm>
#include <limits>
#include <map>

#include <fmt/format.h>

#include "tokenizer/unicode.h"

namespace koi::grammar {

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;
constexpr int32_t kUnbounded = std::numeric_limits<int32_t>::max() / 4;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }


using ByteRanges = std::vector<std::pair<uint8_t, uint8_t>>;

// Splits [lo, hi] (code points of one UTF-8 length) into sequences of byte ranges, each a
// product of ranges (the utf8-ranges construction of RE2 / regex-syntax).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteRanges>* out) {
  const int n = utf8_length(lo);
  for (int i = 1; i < n; ++i) {
    const uint32_t m = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~m) != (hi & ~m)) {
      if ((lo & m) != 0) {
        utf8_sequences(lo, lo | m, out);
        utf8_sequences((lo | m) + 1, hi, out);
        return;
      }
      if ((hi & m) != m) {
        utf8_sequences(lo, (hi & ~m) - 1, out);
        utf8_sequences(hi & ~m, hi, out);
        return;
      }
    }
  }
  const std::string a = tokenizer::encode_utf8(lo), b = tokenizer::encode_utf8(hi);
  ByteRanges seq;
  for (size_t k = 0; k < a.size(); ++k) seq.push_back({uint8_t(a[k]), uint8_t(b[k])});
  out->push_back(std::move(seq));
}

// How a code point that JSON must escape is written inside a string literal.
std::string json_escape(uint32_t cp) {
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\n': return "\\n";
    case '\t': return "\\t";
    case '\r': return "\\r";
    case '\b': return "\\b";
    case '\f': return "\\f";
    default: return fmt::format("\\u{:04x}", cp);
  }
}

bool needs_json_escape(uint32_t cp) { return cp < 0x20 || cp == '"' || cp == '\\'; }

}  // namespace

CodepointSet normalize(CodepointSet set) {
  CodepointSet clipped;
  for (CodepointRange r : set) {
    r.hi = std::min(r.hi, kMaxCodepoint);
    if (r.lo > r.hi) continue;
    // Surrogates are not characters; UTF-8 cannot encode them.
    if (r.lo < 0xD800 && r.hi > 0xDFFF) {
      clipped.push_back({r.lo, 0xD7FF});
      clipped.push_back({0xE000, r.hi});
    } else if (r.lo >= 0xD800 && r.hi <= 0xDFFF) {
      continue;
    } else if (r.lo >= 0xD800 && r.lo <= 0xDFFF) {
      clipped.push_back({0xE000, r.hi});
    } else if (r.hi >= 0xD800 && r.hi <= 0xDFFF) {
      clipped.push_back({r.lo, 0xD7FF});
    } else {
      clipped.push_back(r);
    }
  }
  std::sort(clipped.begin(), clipped.end(), [](auto a, auto b) { return a.lo < b.lo; });
  CodepointSet out;
  for (CodepointRange r : clipped) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CodepointSet complement(const CodepointSet& set) {
  CodepointSet out;
  uint32_t next = 0;
  for (CodepointRange r : normalize(set)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return normalize(out);
}

int32_t GrammarBuilder::new_rule(std::string_view name) {
  std::string unique(name);
  if (std::find(names_.begin(), names_.end(), unique) != names_.end()) {
    for (int k = 1;; ++k) {
      unique = fmt::format("{}-{}", name, k);
      if (std::find(names_.begin(), names_.end(), unique) == names_.end()) break;
    }
  }
  names_.push_back(std::move(unique));
  rules_.emplace_back();
  return static_cast<int32_t>(rules_.size() - 1);
}

int32_t GrammarBuilder::rule_named(std::string_view name) {
  auto it = std::find(names_.begin(), names_.end(), name);
  if (it != names_.end()) return static_cast<int32_t>(it - names_.begin());
  return new_rule(name);
}

void GrammarBuilder::add_alternative(int32_t rule, Sequence seq) { rules_[rule].push_back(std::move(seq)); }

Element GrammarBuilder::bytes(const ByteSet& set) {
  auto it = std::find(byte_sets_.begin(), byte_sets_.end(), set);
  if (it == byte_sets_.end()) {
    byte_sets_.push_back(set);
    it = byte_sets_.end() - 1;
  }
  return {ElementKind::kBytes, static_cast<int32_t>(it - byte_sets_.begin())};
}

Element GrammarBuilder::byte(uint8_t b) {
  ByteSet s;
  s.set(b);
  return bytes(s);
}

Sequence GrammarBuilder::literal(std::string_view text) {
  Sequence seq;
  for (char c : text) seq.push_back(byte(static_cast<uint8_t>(c)));
  return seq;
}

Element GrammarBuilder::codepoints(const CodepointSet& input, bool json_string) {
  const CodepointSet set = normalize(input);
  std::vector<Sequence> alternatives;
  ByteSet ascii;
  for (CodepointRange r : set) {
    for (uint32_t cp = r.lo; cp <= std::min<uint32_t>(r.hi, 0x7F); ++cp) {
      if (json_string && needs_json_escape(cp)) {
        alternatives.push_back(literal(json_escape(cp)));
      } else {
        ascii.set(static_cast<uint8_t>(cp));
      }
    }
    // Each run of one UTF-8 length at a time.
    for (uint32_t lo = std::max<uint32_t>(r.lo, 0x80); lo <= r.hi;) {
      const uint32_t len_end = lo < 0x800 ? 0x7FF : lo < 0x10000 ? 0xFFFF : kMaxCodepoint;
      const uint32_t hi = std::min(r.hi, len_end);
      std::vector<ByteRanges> seqs;
      utf8_sequences(lo, hi, &seqs);
      for (const ByteRanges& ranges : seqs) {
        Sequence seq;
        for (auto [a, b] : ranges) {
          ByteSet s;
          s.set_range(a, b);
          seq.push_back(bytes(s));
        }
        alternatives.push_back(std::move(seq));
      }
      if (hi == kMaxCodepoint) break;
      lo = hi + 1;
    }
  }
  if (alternatives.empty() && !ascii.empty()) return bytes(ascii);
  if (!ascii.empty()) alternatives.insert(alternatives.begin(), Sequence{bytes(ascii)});
  return choice("char", std::move(alternatives));
}

Element GrammarBuilder::choice(std::string_view name, std::vector<Sequence> alternatives) {
  const int32_t id = new_rule(name);
  for (Sequence& s : alternatives) add_alternative(id, std::move(s));
  return rule(id);
}

Result<Element> GrammarBuilder::repeat(std::string_view name, const Sequence& seq, int min, int max) {
  if (min < 0 || (max >= 0 && max < min)) {
    return Status::invalid_argument(fmt::format("repetition {{{},{}}} is empty; need 0 <= min <= max", min, max));
  }
  const int bound = max >= 0 ? max : min;
  if (static_cast<int64_t>(bound) * static_cast<int64_t>(std::max<size_t>(seq.size(), 1)) > kMaxRepeat) {
    return Status::invalid_argument(fmt::format("repetition bound {} is too large (at most {} elements unrolled)",
                                                bound, kMaxRepeat));
  }
  Sequence body;
  for (int i = 0; i < min; ++i) body.insert(body.end(), seq.begin(), seq.end());
  if (max < 0) {
    const int32_t star = new_rule(std::string(name) + "-star");
    Sequence loop = seq;
    loop.push_back(rule(star));
    add_alternative(star, std::move(loop));
    add_alternative(star, {});
    body.push_back(rule(star));
  } else if (max > min) {
    // opt_k ::= seq opt_{k-1} | "" : at most k more copies.
    int32_t tail = -1;
    for (int k = 1; k <= max - min; ++k) {
      const int32_t opt = new_rule(std::string(name) + "-opt");
      Sequence more = seq;
      if (tail >= 0) more.push_back(rule(tail));
      add_alternative(opt, std::move(more));
      add_alternative(opt, {});
      tail = opt;
    }
    body.push_back(rule(tail));
  }
  return choice(name, {std::move(body)});
}

Result<Grammar> GrammarBuilder::build(int32_t root) && {
  const int n = static_cast<int>(rules_.size());
  for (int r = 0; r < n; ++r) {
    if (rules_[r].empty()) {
      return Status::invalid_argument(fmt::format("rule '{}' is used but never defined", names_[r]));
    }
  }
  // Nullable rules, then left-edge references through nullable prefixes.
  std::vector<char> nullable(static_cast<size_t>(n), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      if (nullable[r]) continue;
      for (const Sequence& s : rules_[r]) {
        const bool all = std::all_of(s.begin(), s.end(), [&](Element e) {
          return e.kind == ElementKind::kRule && nullable[e.value];
        });
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  std::vector<std::vector<int32_t>> left(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      for (Element e : s) {
        if (e.kind != ElementKind::kRule) break;
        left[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
    }
  }
  std::vector<int> color(static_cast<size_t>(n), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (int start = 0; start < n; ++start) {
    if (color[start]) continue;
    path.push_back({start, 0});
    color[start] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == left[r].size()) {
        color[r] = 2;
        path.pop_back();
        continue;
      }
      const int32_t to = left[r][next++];
      if (color[to] == 1) {
        return Status::invalid_argument(fmt::format(
            "rule '{}' is left-recursive (it can start with itself); rewrite it with repetition, e.g. x ::= y (\",\" y)*",
            names_[to]));
      }
      if (color[to] == 0) {
        color[to] = 1;
        path.push_back({to, 0});
      }
    }
  }

  // Fewest bytes per rule (fixed point), then per position.
  std::vector<int32_t> rule_min(static_cast<size_t>(n), kUnbounded);
  auto seq_min = [&](const Sequence& s) {
    int64_t total = 0;
    for (Element e : s) total += e.kind == ElementKind::kBytes ? 1 : rule_min[e.value];
    return static_cast<int32_t>(std::min<int64_t>(total, kUnbounded));
  };
  for (bool changed = true; changed;) {
    changed = false;
    for (int r = 0; r < n; ++r) {
      for (const Sequence& s : rules_[r]) {
        const int32_t m = seq_min(s);
        if (m < rule_min[r]) {
          rule_min[r] = m;
          changed = true;
        }
      }
    }
  }

  Grammar g;
  g.root = root;
  g.rule_names = std::move(names_);
  g.byte_sets = std::move(byte_sets_);
  g.rule_alternatives.resize(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    for (const Sequence& s : rules_[r]) {
      g.rule_alternatives[r].push_back(static_cast<int32_t>(g.elements.size()));
      g.elements.insert(g.elements.end(), s.begin(), s.end());
      g.elements.push_back({ElementKind::kEnd, 0});
    }
  }
  g.min_bytes_from.assign(g.elements.size(), 0);
  for (size_t i = g.elements.size(); i-- > 0;) {
    const Element e = g.elements[i];
    if (e.kind == ElementKind::kEnd) continue;
    const int64_t here = e.kind == ElementKind::kBytes ? 1 : rule_min[e.value];
    g.min_bytes_from[i] = static_cast<int32_t>(std::min<int64_t>(here + g.min_bytes_from[i + 1], kUnbounded));
  }
  return g;
}

namespace {

std::string byte_set_string(const ByteSet& s) {
  std::string out = "[";
  for (int b = 0; b < 256;) {
    if (!s.test(static_cast<uint8_t>(b))) {
      ++b;
      continue;
    }
    int e = b;
    while (e + 1 < 256 && s.test(static_cast<uint8_t>(e + 1))) ++e;
    auto show = [](int c) {
      return c >= 0x21 && c < 0x7F && c != ']' && c != '\\' && c != '-' && c != '^' ? std::string(1, char(c))
                                                                                   : fmt::format("\\x{:02X}", c);
    };
    out += show(b);
    if (e > b) out += "-" + show(e);
    b = e + 1;
  }
  return out + "]";
}

}  // namespace

std::string Grammar::to_string() const {
  std::string out;
  for (int r = 0; r < num_rules(); ++r) {
    out += rule_names[r] + " ::=";
    for (size_t a = 0; a < rule_alternatives[r].size(); ++a) {
      if (a) out += " |";
      for (int32_t p = rule_alternatives[r][a]; elements[p].kind != ElementKind::kEnd; ++p) {
        const Element e = elements[p];
        out += " " + (e.kind == ElementKind::kRule ? rule_names[e.value] : byte_set_string(byte_sets[e.value]));
      }
      if (elements[rule_alternatives[r][a]].kind == ElementKind::kEnd) out += " \"\"";
    }
    out += "\n";
  }
  return out;
}

}  // namespace koi::grammar
