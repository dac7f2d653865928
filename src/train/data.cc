#include "train/data.h"

#include <algorithm>
#include <cstdio>
#include <map>

#include "base/check.h"
#include "base/random.h"
#include "tokenizer/unicode.h"

namespace koi::train {
namespace {

// The UTF-8 characters of text, in order.
std::vector<std::string_view> split_chars(std::string_view text) {
  std::vector<std::string_view> out;
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = tokenizer::utf8_piece_len(text, pos);
    out.push_back(text.substr(pos, len));
    pos += len;
  }
  return out;
}

}  // namespace

CharVocab CharVocab::from_text(std::string_view text) {
  std::vector<std::string> chars;
  for (std::string_view ch : split_chars(text)) chars.emplace_back(ch);
  // Byte order of UTF-8 is code-point order.
  std::sort(chars.begin(), chars.end());
  chars.erase(std::unique(chars.begin(), chars.end()), chars.end());
  return CharVocab(std::move(chars));
}

Result<std::vector<int32_t>> CharVocab::encode(std::string_view text) const {
  std::map<std::string_view, int32_t> ids;
  for (size_t i = 0; i < chars_.size(); ++i) ids[chars_[i]] = static_cast<int32_t>(i);
  std::vector<int32_t> out;
  out.reserve(text.size());
  size_t offset = 0;
  for (std::string_view ch : split_chars(text)) {
    auto it = ids.find(ch);
    if (it == ids.end()) {
      return Status::invalid_argument("character '" + std::string(ch) + "' at byte " + std::to_string(offset) +
                                      " is not in the character vocabulary of " + std::to_string(chars_.size()) +
                                      " characters; build the vocabulary from a corpus that contains it");
    }
    out.push_back(it->second);
    offset += ch.size();
  }
  return out;
}

tokenizer::TokenizerSpec CharVocab::to_spec() const {
  tokenizer::TokenizerSpec spec;
  spec.kind = tokenizer::TokenizerKind::kSentencePiece;
  spec.add_space_prefix = false;
  spec.add_bos = false;
  for (const std::string& ch : chars_) {
    spec.tokens.push_back(ch == " " ? "\u2581" : ch);
    spec.types.push_back(tokenizer::TokenType::kNormal);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    spec.tokens.push_back(name);
    spec.types.push_back(tokenizer::TokenType::kByte);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  return spec;
}

BatchLoader::BatchLoader(const std::vector<int32_t>* tokens, int B, int T, uint64_t seed)
    : tokens_(tokens), B_(B), T_(T), seed_(seed) {
  KOI_CHECK(static_cast<int64_t>(tokens->size()) > T);
}

void BatchLoader::next(int32_t* inputs, int32_t* targets) {
  Rng rng(seed_ * 0x9E3779B97F4A7C15ull + position_++);
  const uint64_t range = tokens_->size() - static_cast<uint64_t>(T_);
  for (int b = 0; b < B_; ++b) {
    const int32_t* src = tokens_->data() + rng.below(range);
    std::copy_n(src, T_, inputs + int64_t{b} * T_);
    std::copy_n(src + 1, T_, targets + int64_t{b} * T_);
  }
}

}  // namespace koi::train
