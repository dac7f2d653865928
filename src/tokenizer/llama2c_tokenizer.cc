#include <cstring>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {

Result<TokenizerSpec> load_llama2c_tokenizer(const std::string& path, int32_t vocab_size) {
  KOI_ASSIGN_OR_RETURN(std::string bytes, read_file(path));
  size_t pos = 0;
  auto read = [&](void* dst, size_t n) {
    if (bytes.size() - pos < n) return false;
    std::memcpy(dst, bytes.data() + pos, n);
    pos += n;
    return true;
  };
  const std::string hint = "; the file is truncated or not a llama2.c tokenizer, export it again";
  int32_t max_token_length = 0;
  if (!read(&max_token_length, 4) || max_token_length <= 0) {
    return Status::corrupt(path + ": no valid max_token_length header" + hint);
  }
  TokenizerSpec spec;
  spec.kind = TokenizerKind::kSentencePiece;
  while (vocab_size > 0 ? spec.tokens.size() < size_t(vocab_size) : pos < bytes.size()) {
    const std::string where = path + ": token " + std::to_string(spec.tokens.size()) +
                              (vocab_size > 0 ? " of " + std::to_string(vocab_size) : "");
    float score = 0;
    int32_t len = 0;
    if (!read(&score, 4) || !read(&len, 4)) return Status::corrupt(where + " is cut off" + hint);
    if (len < 0 || len > max_token_length || bytes.size() - pos < size_t(len)) {
      return Status::corrupt(where + " has length " + std::to_string(len) + " past the file end or max_token_length " +
                             std::to_string(max_token_length) + hint);
    }
    std::string text = bytes.substr(pos, len);
    pos += len;
    TokenType type = TokenType::kNormal;
    size_t id = spec.tokens.size();
    if (id == 0) {
      type = TokenType::kUnknown;
    } else if (id <= 2) {
      // llama2.c stores "\n<s>\n" and "\n</s>\n"; SentencePiece and GGUF call them <s>, </s>.
      text = id == 1 ? "<s>" : "</s>";
      type = TokenType::kControl;
    } else if (parse_byte_token(text) >= 0) {
      type = TokenType::kByte;
    } else {
      text = replace_all(text, " ", "\xE2\x96\x81");
    }
    spec.tokens.push_back(std::move(text));
    spec.scores.push_back(score);
    spec.types.push_back(type);
  }
  if (spec.tokens.size() < 3) {
    return Status::corrupt(path + ": has " + std::to_string(spec.tokens.size()) +
                           " tokens, fewer than <unk>, <s>, </s>" + hint);
  }
  spec.unk_id = 0;
  spec.bos_id = 1;
  spec.eos_id = 2;
  spec.add_bos = true;
  spec.add_space_prefix = true;
  return spec;
}

}  // namespace koi::tokenizer
