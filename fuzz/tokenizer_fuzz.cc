// libFuzzer target: encode arbitrary bytes with the stories260K SentencePiece tokenizer
// (and with special-token parsing), decode them back, and stream-decode them. Checks that
// decode(encode(x)) == x, that every id is in the vocabulary, and that the stream decoder
// emits only valid UTF-8.
// The tokenizer is $KOI_FUZZ_TOKENIZER, else tok512.bin under KOI_SHARED_DIR when that is
// defined, else ../shared/models/stories260K/tok512.bin (scripts/run-fuzzers runs from the
// repository root). With KOI_FUZZ_SEED_DIR set, a few seed texts are written there first.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <string>
#include <string_view>

#include "base/file.h"
#include "tokenizer/load.h"
#include "tokenizer/tokenizer.h"

namespace {

const koi::tokenizer::Tokenizer& fuzz_tokenizer() {
  static const koi::tokenizer::Tokenizer tok = [] {
    const char* env = std::getenv("KOI_FUZZ_TOKENIZER");
#ifdef KOI_SHARED_DIR
    const std::string shared = KOI_SHARED_DIR;
#else
    const std::string shared = "../shared";
#endif
    std::string path = env ? env : shared + "/models/stories260K/tok512.bin";
    auto loaded = koi::tokenizer::load_tokenizer(path);
    if (!loaded.ok()) {
      std::fprintf(stderr, "tokenizer_fuzz: %s (set KOI_FUZZ_TOKENIZER)\n", loaded.status().message().c_str());
      std::abort();
    }
    return std::move(loaded).value();
  }();
  return tok;
}

// Whether `s` is valid UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    uint8_t b = s[i];
    size_t n = b < 0x80 ? 1 : b >= 0xC2 && b <= 0xDF ? 2 : b >= 0xE0 && b <= 0xEF ? 3 : b >= 0xF0 && b <= 0xF4 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    uint32_t cp = n == 1 ? b : b & (0x7F >> n);
    for (size_t k = 1; k < n; ++k) {
      if ((uint8_t(s[i + k]) & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (s[i + k] & 0x3F);
    }
    if ((n == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF))) {
      return false;
    }
    i += n;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  if (const char* dir = std::getenv("KOI_FUZZ_SEED_DIR")) {
    const char* seeds[] = {"Once upon a time, there was a little girl named Lily.",
                           "<s>caf\xC3\xA9 \xF0\x9F\x99\x82</s>\n\n  x", "\x80\xC3(\xF0\x9F"};
    for (size_t i = 0; i < std::size(seeds); ++i) {
      (void)koi::write_file_atomic(koi::path_join(dir, "seed" + std::to_string(i)), seeds[i]);
    }
  }
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto& tok = fuzz_tokenizer();
  std::string_view text(reinterpret_cast<const char*>(data), size);
  for (bool parse_special : {false, true}) {
    std::vector<int32_t> ids = tok.encode(text, true, parse_special);
    for (int32_t id : ids) {
      if (id < 0 || id >= tok.n_vocab()) std::abort();
    }
    if (!parse_special && tok.decode(ids, true) != text) std::abort();
    koi::tokenizer::StreamDecoder stream(&tok);
    std::string streamed;
    for (int32_t id : ids) streamed += stream.push(id);
    streamed += stream.flush();
    if (!valid_utf8(streamed)) std::abort();
    if (valid_utf8(text) && streamed != tok.decode(ids)) std::abort();
  }
  return 0;
}
