// train_bpe: learns a new byte-level BPE tokenizer (GPT-2 / Llama 3 style) from text.
//
// The vocabulary is, by id: the 256 bytes (id = byte value, text in GPT-2's byte-to-unicode
// alphabet, "Ġ" for a space), then one token per learned merge, then the special tokens
// (bos, eos, then `specials`, as control tokens). Text is cut at the special tokens, split
// by the "llama-bpe" (Llama 3) pre-tokenizer regex and counted once per distinct piece;
// then the most frequent adjacent pair of tokens over all pieces merges, repeatedly, until
// the vocabulary has vocab_size tokens or no pair occurs min_frequency times. Ties go to the
// pair with the smaller (left id, right id), so the result depends only on the text and the
// options (not on threads). Pair counts are kept incrementally (with, per pair, the pieces
// that hold it) and the best pair comes from a max-heap with lazy invalidation: a merge
// costs time in the pieces it touches, not in the corpus.
//
// The spec has ignore_merges false, no BOS/EOS added by encode, and encodes as Hugging
// Face's BPE with the same tokenizer.json would (hf_writer.h writes it). A plain function,
// thread-safe; fails only on invalid options, with a message naming the option.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

struct BpeTrainOptions {
  int vocab_size = 0;     // every token: 256 bytes + merges + special tokens
  int min_frequency = 2;  // a pair merges only when it occurs at least this often
  std::string bos = "<|begin_of_text|>";  // "" for none
  std::string eos = "<|end_of_text|>";    // "" for none
  std::vector<std::string> specials;      // more control tokens ("<|eot_id|>", ...)
  int threads = 1;                        // for splitting and counting the pieces
  // Called after every merge with (tokens learned, tokens wanted: vocab_size - 256 -
  // specials); may be empty.
  std::function<void(int done, int total)> progress;
};

// The texts are independent documents (no piece spans two). The result may have fewer than
// vocab_size tokens when the corpus runs out of pairs occurring min_frequency times.
Result<TokenizerSpec> train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& options);

}  // namespace koi::tokenizer
