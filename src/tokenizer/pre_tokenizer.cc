#include "tokenizer/pre_tokenizer.h"

#include <algorithm>
#include <optional>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

using Kind = PreTokenizerStep::Kind;
using Matches = std::vector<std::pair<size_t, size_t>>;

// The GPT-2 pattern a ByteLevel pre-tokenizer applies when use_regex is set.
constexpr std::string_view kGpt2Regex =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
// Rust's char::is_numeric, one character a match (Digits).
constexpr std::string_view kDigit = R"(\p{N})";
// char::is_ascii_punctuation || is_punctuation (Punctuation).
constexpr std::string_view kPunctuation = R"([\p{P}\x21-\x2F\x3A-\x40\x5B-\x60\x7B-\x7E])";
// Unicode White_Space (WhitespaceSplit), and Rust regex's Unicode \w+|[^\w\s]+ (Whitespace).
constexpr std::string_view kSpace = R"([\t-\r\x{85}\p{Z}])";
constexpr std::string_view kWords =
    R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}]+|[^\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}\t-\r\x{85}\p{Z}]+)";

// The cut a step makes; no regex for a step that only maps (ByteLevel without its regex,
// Metaspace without split).
struct Cutter {
  std::optional<Regex> re;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
};

Status make_cutter(const PreTokenizerStep& step, Cutter* out) {
  auto cutter = [out](std::string_view pattern, bool literal, SplitBehavior behavior, bool invert) -> Status {
    Result<Regex> re = Regex::create(pattern, literal);
    if (!re.ok()) return Status::invalid_argument("pre-tokenizer " + re.status().message());
    out->re = std::move(*re);
    out->behavior = behavior;
    out->invert = invert;
    return ok_status();
  };
  switch (step.kind) {
    case Kind::kSplit: return cutter(step.pattern, !step.regex, step.behavior, step.invert);
    case Kind::kByteLevel:
      if (!step.use_regex) return ok_status();
      return cutter(kGpt2Regex, false, SplitBehavior::kIsolated, false);
    case Kind::kDigits:
      return cutter(kDigit, false, step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                    false);
    case Kind::kPunctuation: return cutter(kPunctuation, false, step.behavior, false);
    case Kind::kWhitespace: return cutter(kWords, false, SplitBehavior::kRemoved, true);
    case Kind::kWhitespaceSplit: return cutter(kSpace, false, SplitBehavior::kRemoved, false);
    case Kind::kMetaspace:
      if (!step.split) return ok_status();
      return cutter(step.replacement, true, SplitBehavior::kMergedWithNext, false);
  }
  return ok_status();
}

void cut(const Cutter& cutter, std::string_view piece, std::vector<std::string_view>* out) {
  if (!cutter.re) {
    out->push_back(piece);
    return;
  }
  Matches matches;
  cutter.re->find_all(piece, &matches);
  split_by_matches(piece, matches, cutter.behavior, cutter.invert, out);
}

// What Metaspace does to a piece before it cuts: spaces become the replacement, and the
// replacement goes in front where the scheme says.
std::string metaspace(const PreTokenizerStep& step, std::string_view piece, bool at_start) {
  std::string s = replace_all(piece, " ", step.replacement);
  bool prepend = step.prepend_scheme == PrependScheme::kAlways ||
                 (step.prepend_scheme == PrependScheme::kFirst && at_start);
  if (prepend && s.rfind(step.replacement, 0) != 0) s.insert(0, step.replacement);
  return s;
}

}  // namespace

void split_by_matches(std::string_view text, const Matches& matches, SplitBehavior behavior, bool invert,
                      std::vector<std::string_view>* out) {
  // The text as alternating runs: (start, end, is_match), as Hugging Face's find_matches.
  struct Run {
    size_t start, end;
    bool match;
  };
  std::vector<Run> runs;
  size_t done = 0;
  for (auto [start, end] : matches) {
    if (start > done) runs.push_back({done, start, invert});
    runs.push_back({start, end, !invert});
    done = end;
  }
  if (done < text.size()) runs.push_back({done, text.size(), invert});

  std::vector<Run> merged;
  switch (behavior) {
    case SplitBehavior::kRemoved:
      for (const Run& r : runs) {
        if (!r.match) merged.push_back(r);
      }
      break;
    case SplitBehavior::kIsolated:
      for (const Run& r : runs) merged.push_back(r);
      break;
    case SplitBehavior::kMergedWithPrevious: {
      bool previous_match = false;
      for (const Run& r : runs) {
        if (r.match && !previous_match && !merged.empty()) {
          merged.back().end = r.end;
        } else {
          merged.push_back(r);
        }
        previous_match = r.match;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {  // the last of a row of matches joins the text after it
      bool previous_match = false;
      for (const Run& r : runs) {
        if (!r.match && previous_match) {
          merged.back().end = r.end;
        } else {
          merged.push_back(r);
        }
        previous_match = r.match;
      }
      break;
    }
    case SplitBehavior::kContiguous: {
      bool previous_match = false;
      for (const Run& r : runs) {
        if (r.match == previous_match && !merged.empty()) {
          merged.back().end = r.end;
        } else {
          merged.push_back(r);
        }
        previous_match = r.match;
      }
      break;
    }
  }
  for (const Run& r : merged) {
    if (r.end > r.start) out->push_back(text.substr(r.start, r.end - r.start));
  }
}

struct PreTokenizer::Impl {
  struct Step {
    PreTokenizerStep spec;
    Cutter cutter;
  };
  std::vector<Step> steps;
};

Result<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
  std::vector<PreTokenizerStep> steps;
  for (const std::string& regex : regexes) {
    PreTokenizerStep step;
    step.kind = Kind::kSplit;
    step.pattern = regex;
    step.regex = true;
    steps.push_back(step);
  }
  return create(steps);
}

Result<PreTokenizer> PreTokenizer::create(const std::vector<PreTokenizerStep>& steps) {
  auto impl = std::make_shared<Impl>();
  for (const PreTokenizerStep& step : steps) {
    impl->steps.push_back({step, Cutter()});
    KOI_RETURN_IF_ERROR(make_cutter(step, &impl->steps.back().cutter));
  }
  return PreTokenizer(std::move(impl));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* out) const {
  std::vector<std::string_view> pieces{text};
  for (const Impl::Step& step : impl_->steps) {
    if (!step.cutter.re) continue;
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) cut(step.cutter, piece, &next);
    pieces = std::move(next);
  }
  out->insert(out->end(), pieces.begin(), pieces.end());
}

void PreTokenizer::pre_tokenize(std::string_view text, bool first, std::vector<std::string>* out) const {
  std::vector<std::string> pieces{std::string(text)};
  for (const Impl::Step& step : impl_->steps) {
    std::vector<std::string> next;
    for (size_t i = 0; i < pieces.size(); ++i) {
      std::string piece = std::move(pieces[i]);
      if (step.spec.kind == Kind::kByteLevel && step.spec.add_prefix_space && piece.rfind(' ', 0) != 0) {
        piece.insert(0, " ");
      }
      if (step.spec.kind == Kind::kMetaspace) piece = metaspace(step.spec, piece, first && i == 0);
      std::vector<std::string_view> cuts;
      cut(step.cutter, piece, &cuts);
      for (std::string_view c : cuts) {
        if (step.spec.kind != Kind::kByteLevel) {
          next.emplace_back(c);
          continue;
        }
        std::string mapped;
        append_byte_level(c, &mapped);
        next.push_back(std::move(mapped));
      }
    }
    pieces = std::move(next);
  }
  for (std::string& piece : pieces) {
    if (!piece.empty()) out->push_back(std::move(piece));
  }
}

size_t next_safe_cut(std::string_view text, size_t from) {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (text[pos - 1] == '\n' && text[pos] > ' ' && text[pos] < 0x7F) return pos;
  }
  return text.size();
}

}  // namespace koi::tokenizer
