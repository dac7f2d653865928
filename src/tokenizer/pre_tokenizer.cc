#include "tokenizer/pre_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

struct RegexDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using Regex = std::unique_ptr<pcre2_code, RegexDeleter>;

Result<Regex> compile_regex(const std::string& pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &error,
                                   &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Status::invalid_argument("pre-tokenizer regex '" + pattern + "' does not compile at offset " +
                                    std::to_string(offset) + ": " +
                                    reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // an interpreter fallback when JIT is unavailable
  return Regex(code);
}

// Cuts `text` into the matches of `re` and the text between them (HF Split "Isolated").
void split_regex(const pcre2_code* re, std::string_view text, std::vector<std::string_view>* out) {
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t done = 0;
  size_t offset = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(re, subject, text.size(), offset, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(re, subject, text.size(), offset, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // an empty match splits nothing; step over one character
      offset = ov[0] + utf8_piece_len(text, ov[0]);
      continue;
    }
    if (ov[0] > done) out->push_back(text.substr(done, ov[0] - done));
    out->push_back(text.substr(ov[0], ov[1] - ov[0]));
    done = offset = ov[1];
  }
  if (done < text.size()) out->push_back(text.substr(done));
  pcre2_match_data_free(md);
}

}  // namespace

struct PreTokenizer::Impl {
  std::vector<Regex> regexes;
};

Result<PreTokenizer> PreTokenizer::create(const std::vector<std::string>& regexes) {
  auto impl = std::make_shared<Impl>();
  for (const std::string& pattern : regexes) {
    KOI_ASSIGN_OR_RETURN(Regex re, compile_regex(pattern));
    impl->regexes.push_back(std::move(re));
  }
  return PreTokenizer(std::move(impl));
}

void PreTokenizer::split(std::string_view text, std::vector<std::string_view>* out) const {
  std::vector<std::string_view> pieces{text};
  for (const Regex& re : impl_->regexes) {
    std::vector<std::string_view> next;
    for (std::string_view piece : pieces) split_regex(re.get(), piece, &next);
    pieces = std::move(next);
  }
  out->insert(out->end(), pieces.begin(), pieces.end());
}

size_t next_safe_cut(std::string_view text, size_t from) {
  for (size_t pos = from; pos < text.size(); ++pos) {
    if (text[pos - 1] == '\n' && text[pos] > ' ' && text[pos] < 0x7F) return pos;
  }
  return text.size();
}

}  // namespace koi::tokenizer
