#include "tokenizer/decoder.h"

#include <optional>

#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

using Kind = DecoderStep::Kind;

// Strips up to `count` copies of `content` from the front (back: from the end) of s.
void strip_side(std::string* s, std::string_view content, int32_t count, bool back) {
  for (int32_t i = 0; i < count && !content.empty(); ++i) {
    if (!back && s->rfind(content, 0) == 0) {
      s->erase(0, content.size());
    } else if (back && s->size() >= content.size() &&
               s->compare(s->size() - content.size(), content.size(), content) == 0) {
      s->erase(s->size() - content.size());
    } else {
      return;
    }
  }
}

}  // namespace

struct Decoder::Impl {
  struct Step {
    DecoderStep spec;
    std::optional<Regex> pattern;  // kReplace
    bool after_fuse = false;
  };
  std::vector<Step> steps;
};

Result<Decoder> Decoder::create(const std::vector<DecoderStep>& steps) {
  auto impl = std::make_shared<Impl>();
  bool fused = false;
  for (const DecoderStep& step : steps) {
    Impl::Step s{step, std::nullopt, fused};
    if (step.kind == Kind::kReplace) {
      KOI_ASSIGN_OR_RETURN(Regex re, Regex::create(step.pattern, !step.regex));
      s.pattern = std::move(re);
    }
    if (step.kind == Kind::kStrip && fused && step.stop > 0) {
      return Status::unsupported("decoder Strip with stop > 0 after a Fuse is not supported (it strips the end "
                                 "of the whole text, which a streaming decoder cannot know)");
    }
    if (step.kind == Kind::kStrip && (step.start < 0 || step.stop < 0)) {
      return Status::invalid_argument("decoder Strip has a negative start or stop");
    }
    fused = fused || step.kind == Kind::kFuse;
    impl->steps.push_back(std::move(s));
  }
  return Decoder(std::move(impl));
}

void Decoder::decode_piece(std::string_view token, bool at_start, std::string* out) const {
  std::string s(token);
  for (const Impl::Step& step : impl_->steps) {
    switch (step.spec.kind) {
      case Kind::kByteLevel: {
        std::string bytes;
        append_byte_level_decoded(s, &bytes);
        s = std::move(bytes);
        break;
      }
      case Kind::kMetaspace:
        s = replace_all(s, step.spec.replacement, " ");
        if (at_start && step.spec.prepend_scheme != PrependScheme::kNever && s.rfind(' ', 0) == 0) s.erase(0, 1);
        break;
      case Kind::kReplace:
        s = step.pattern->replace_all(s, step.spec.content);
        break;
      case Kind::kByteFallback:
        if (int byte = parse_byte_token(s); byte >= 0) s = std::string(1, char(byte));
        break;
      case Kind::kFuse:
        break;
      case Kind::kStrip:
        if (!step.after_fuse || at_start) strip_side(&s, step.spec.content, step.spec.start, false);
        if (!step.after_fuse) strip_side(&s, step.spec.content, step.spec.stop, true);
        break;
    }
  }
  out->append(s);
}

}  // namespace koi::tokenizer
