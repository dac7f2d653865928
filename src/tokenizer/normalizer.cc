#include "tokenizer/normalizer.h"

#include <unicode/locid.h>
#include <unicode/normalizer2.h>
#include <unicode/uchar.h>
#include <unicode/unistr.h>
#include <unicode/utf8.h>

#include <optional>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

const icu::Normalizer2* icu_form(NormalizerStep::Kind form) {
  UErrorCode status = U_ZERO_ERROR;
  switch (form) {
    case NormalizerStep::Kind::kNfc: return icu::Normalizer2::getNFCInstance(status);
    case NormalizerStep::Kind::kNfd: return icu::Normalizer2::getNFDInstance(status);
    case NormalizerStep::Kind::kNfkc: return icu::Normalizer2::getNFKCInstance(status);
    case NormalizerStep::Kind::kNfkd: return icu::Normalizer2::getNFKDInstance(status);
    default: return nullptr;
  }
}

// Calls fn(run, valid) for the maximal runs of valid UTF-8 and of invalid bytes, in order.
template <typename Fn>
void for_each_run(std::string_view text, Fn fn) {
  size_t run_start = 0;
  bool run_valid = true;
  int32_t pos = 0;
  const int32_t n = int32_t(text.size());
  while (pos < n) {
    int32_t at = pos;
    UChar32 cp;
    U8_NEXT(reinterpret_cast<const uint8_t*>(text.data()), pos, n, cp);
    bool valid = cp >= 0;
    if (valid != run_valid && size_t(at) > run_start) {
      fn(text.substr(run_start, at - run_start), run_valid);
      run_start = at;
    }
    run_valid = valid;
  }
  if (run_start < text.size()) fn(text.substr(run_start), run_valid);
}

// Calls fn(cp, bytes) per character; an invalid byte comes as cp -1.
template <typename Fn>
void for_each_char(std::string_view text, Fn fn) {
  int32_t pos = 0;
  const int32_t n = int32_t(text.size());
  while (pos < n) {
    int32_t at = pos;
    UChar32 cp;
    U8_NEXT(reinterpret_cast<const uint8_t*>(text.data()), pos, n, cp);
    fn(cp, text.substr(at, pos - at));
  }
}

std::string strip(std::string_view text, bool left, bool right) {
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    bool stop = false;
    for_each_char(text, [&](int32_t cp, std::string_view bytes) {
      if (stop) return;
      if (cp >= 0 && is_unicode_space(uint32_t(cp))) {
        begin += bytes.size();
      } else {
        stop = true;
      }
    });
  }
  if (right) {
    size_t last_kept = begin;
    size_t offset = 0;
    for_each_char(text, [&](int32_t cp, std::string_view bytes) {
      offset += bytes.size();
      if (offset > begin && !(cp >= 0 && is_unicode_space(uint32_t(cp)))) last_kept = offset;
    });
    end = std::max(begin, last_kept);
  }
  return std::string(text.substr(begin, end - begin));
}

}  // namespace

bool is_unicode_space(uint32_t cp) { return u_isUWhiteSpace(UChar32(cp)); }

std::string unicode_normalize(std::string_view text, NormalizerStep::Kind form) {
  const icu::Normalizer2* normalizer = icu_form(form);
  std::string out;
  for_each_run(text, [&](std::string_view run, bool valid) {
    UErrorCode status = U_ZERO_ERROR;
    icu::UnicodeString s = icu::UnicodeString::fromUTF8(icu::StringPiece(run.data(), int32_t(run.size())));
    icu::UnicodeString normalized = valid && normalizer != nullptr ? normalizer->normalize(s, status) : s;
    if (!valid || U_FAILURE(status)) {
      out.append(run);
    } else {
      normalized.toUTF8String(out);
    }
  });
  return out;
}

std::string unicode_lowercase(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for_each_char(text, [&](int32_t cp, std::string_view bytes) {
    if (cp < 0x80) {  // ASCII and invalid bytes
      out += cp >= 'A' && cp <= 'Z' ? char(cp + 32) : bytes[0];
      return;
    }
    icu::UnicodeString one{UChar32(cp)};
    one.toLower(icu::Locale::getRoot());
    one.toUTF8String(out);
  });
  return out;
}

struct Normalizer::Impl {
  struct Step {
    NormalizerStep spec;
    std::optional<Regex> pattern;  // kReplace
  };
  std::vector<Step> steps;
};

Result<Normalizer> Normalizer::create(const std::vector<NormalizerStep>& steps) {
  auto impl = std::make_shared<Impl>();
  for (const NormalizerStep& step : steps) {
    Impl::Step s{step, std::nullopt};
    if (step.kind == NormalizerStep::Kind::kReplace) {
      KOI_ASSIGN_OR_RETURN(Regex re, Regex::create(step.pattern, !step.regex));
      s.pattern = std::move(re);
    }
    impl->steps.push_back(std::move(s));
  }
  return Normalizer(std::move(impl));
}

std::string Normalizer::normalize(std::string_view text) const {
  std::string s(text);
  for (const Impl::Step& step : impl_->steps) {
    switch (step.spec.kind) {
      case NormalizerStep::Kind::kNfc:
      case NormalizerStep::Kind::kNfd:
      case NormalizerStep::Kind::kNfkc:
      case NormalizerStep::Kind::kNfkd:
        s = unicode_normalize(s, step.spec.kind);
        break;
      case NormalizerStep::Kind::kLowercase:
        s = unicode_lowercase(s);
        break;
      case NormalizerStep::Kind::kStrip:
        s = strip(s, step.spec.left, step.spec.right);
        break;
      case NormalizerStep::Kind::kReplace:
        s = step.pattern->replace_all(s, step.spec.content);
        break;
      case NormalizerStep::Kind::kPrepend:
        if (!s.empty()) s = step.spec.content + s;
        break;
    }
  }
  return s;
}

}  // namespace koi::tokenizer
