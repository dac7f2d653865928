#include "tokenizer/regex.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "tokenizer/unicode.h"

namespace koi::tokenizer {

struct Regex::Impl {
  pcre2_code* code = nullptr;
  ~Impl() { pcre2_code_free(code); }
};

Result<Regex> Regex::create(std::string_view pattern, bool literal) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  uint32_t options = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(), options,
                                   &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR message[256];
    pcre2_get_error_message(error, message, sizeof(message));
    return Status::invalid_argument("regex '" + std::string(pattern) + "' does not compile at offset " +
                                    std::to_string(offset) + ": " + reinterpret_cast<const char*>(message));
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // an interpreter fallback when JIT is unavailable
  auto impl = std::make_shared<Impl>();
  impl->code = code;
  return Regex(std::move(impl));
}

void Regex::find_all(std::string_view text, std::vector<std::pair<size_t, size_t>>* out) const {
  const pcre2_code* re = impl_->code;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  auto subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t offset = 0;
  while (offset < text.size()) {
    int rc = pcre2_match(re, subject, text.size(), offset, 0, md, nullptr);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT) {
      rc = pcre2_match(re, subject, text.size(), offset, PCRE2_NO_JIT, md, nullptr);
    }
    if (rc < 0) break;
    PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] == ov[0]) {  // an empty match cuts nothing; step over one character
      offset = ov[0] + utf8_piece_len(text, ov[0]);
      continue;
    }
    out->emplace_back(ov[0], ov[1]);
    offset = ov[1];
  }
  pcre2_match_data_free(md);
}

std::string Regex::replace_all(std::string_view text, std::string_view content) const {
  std::vector<std::pair<size_t, size_t>> matches;
  find_all(text, &matches);
  std::string out;
  size_t done = 0;
  for (auto [start, end] : matches) {
    out.append(text.substr(done, start - done));
    out.append(content);
    done = end;
  }
  out.append(text.substr(done));
  return out;
}

}  // namespace koi::tokenizer
