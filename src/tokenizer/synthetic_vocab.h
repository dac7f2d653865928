// A synthetic SentencePiece-style vocabulary of any size, for random-weight benchmark
// models that must load in other engines too (llama.cpp needs a real "llama" vocabulary):
// <unk>, <s>, </s>, the 256 byte tokens, then letter strings with and without the "▁"
// word prefix, scored so that longer pieces merge first.
#pragma once

#include <cstdint>

#include "tokenizer/spec.h"

namespace koi::tokenizer {

// n_vocab must be at least 259 + 26.
TokenizerSpec synthetic_spm_spec(int32_t n_vocab);

}  // namespace koi::tokenizer
