// Decoder: the Hugging Face decoder steps of a tokenizer.json (ByteLevel, Metaspace, Replace,
// Strip, Fuse, ByteFallback; a Sequence is its steps in order), run token by token so that
// streaming and whole-sequence decoding agree. Hugging Face runs the steps on the list of
// token texts; Fuse joins that list into one text. Here the steps before a Fuse work on each
// token, and the ones after it on each token too, except that a Strip after a Fuse strips
// only where the text starts (at the start, and after an added token, where the encoder
// started a new piece of text). Output is bytes: a ByteFallback "<0xXX>" is that byte, and
// bytes that do not form UTF-8 stay as they are (StreamDecoder replaces them).
//
// Immutable after create() and cheap to copy; decode_piece() is safe to call from many
// threads at once. create() fails with a Status naming the step it cannot run (a Strip with
// stop after a Fuse: it would need the end of the text) or a Replace regex that does not
// compile.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

class Decoder {
 public:
  static Result<Decoder> create(const std::vector<DecoderStep>& steps);

  // Appends what `token` (a token's stored text) decodes to. at_start: the token begins a
  // piece of text (first token, or the first after an added token).
  void decode_piece(std::string_view token, bool at_start, std::string* out) const;

 private:
  struct Impl;
  explicit Decoder(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

}  // namespace koi::tokenizer
