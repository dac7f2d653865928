// Training data: a character vocabulary and the batch loader.
//
// CharVocab is nanoGPT's shakespeare_char tokenizer: the sorted distinct characters (UTF-8
// code points) of a corpus, one id each, followed by the 256 byte tokens "<0x00>".."<0xFF>"
// so that the exported SentencePiece-style tokenizer can encode any text (bytes of unseen
// characters fall back to them). A plain value; thread-safe to read.
//
// BatchLoader draws nanoGPT-style batches: B windows of T+1 tokens at uniformly random
// offsets of a token array, inputs = window[0, T), targets = window[1, T+1). Batch number
// i depends only on (seed, i), so the loader's whole state is position() (batches handed
// out), which a checkpoint saves. Holds a pointer to the tokens, which must outlive it.
// Not thread-safe.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::train {

class CharVocab {
 public:
  static CharVocab from_text(std::string_view text);
  static CharVocab from_chars(std::vector<std::string> chars) { return CharVocab(std::move(chars)); }

  const std::vector<std::string>& chars() const { return chars_; }
  int n_vocab() const { return static_cast<int>(chars_.size()) + 256; }
  // Fails on a character outside the vocabulary, naming it and its byte offset.
  Result<std::vector<int32_t>> encode(std::string_view text) const;
  // The SentencePiece-style spec: the characters (" " as "▁"), then byte tokens; no BOS,
  // no space prefix, so that encode(text) of the spec's tokenizer equals encode() here.
  tokenizer::TokenizerSpec to_spec() const;

 private:
  explicit CharVocab(std::vector<std::string> chars) : chars_(std::move(chars)) {}
  std::vector<std::string> chars_;  // sorted by code point
};

class BatchLoader {
 public:
  // tokens.size() must exceed T.
  BatchLoader(const std::vector<int32_t>* tokens, int B, int T, uint64_t seed);

  // Fills inputs and targets, (B, T) each, and advances the position.
  void next(int32_t* inputs, int32_t* targets);
  uint64_t position() const { return position_; }
  void set_position(uint64_t position) { position_ = position; }

 private:
  const std::vector<int32_t>* tokens_;
  int B_, T_;
  uint64_t seed_;
  uint64_t position_ = 0;
};

}  // namespace koi::train
