#include "tokenizer/synthetic_vocab.h"

#include <string>

#include "tokenizer/unicode.h"

namespace koi::tokenizer {

TokenizerSpec synthetic_spm_spec(int32_t n_vocab) {
  TokenizerSpec s;
  s.kind = TokenizerKind::kSentencePiece;
  auto add = [&](std::string text, float score, TokenType type) {
    s.tokens.push_back(std::move(text));
    s.scores.push_back(score);
    s.types.push_back(type);
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  for (int b = 0; b < 256; ++b) add(byte_token_text(uint8_t(b)), 0.0f, TokenType::kByte);
  // Letter strings of growing length: "a".."z", "aa".."zz", ... each also as "▁" + string.
  std::string piece = "a";
  while (static_cast<int32_t>(s.tokens.size()) < n_vocab) {
    const float score = -static_cast<float>(s.tokens.size());
    add(piece, score, TokenType::kNormal);
    if (static_cast<int32_t>(s.tokens.size()) < n_vocab) add("\xE2\x96\x81" + piece, score, TokenType::kNormal);
    // Next string in the order a, b, ..., z, aa, ab, ...
    int i = static_cast<int>(piece.size()) - 1;
    while (i >= 0 && piece[i] == 'z') piece[i--] = 'a';
    if (i < 0) {
      piece.insert(piece.begin(), 'a');
    } else {
      ++piece[i];
    }
  }
  s.bos_id = 1;
  s.eos_id = 2;
  s.unk_id = 0;
  s.add_bos = true;
  s.add_space_prefix = true;
  return s;
}

}  // namespace koi::tokenizer
