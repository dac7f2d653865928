// Loaders: every tokenizer source Koi reads, turned into a TokenizerSpec, and the way back
// into GGUF metadata. Plain functions, thread-safe; each failure is a Status whose message
// names the file (and the field) and says what to do.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "model/gguf.h"
#include "tokenizer/spec.h"
#include "tokenizer/tokenizer.h"

namespace koi::tokenizer {

// llama2.c tokenizer.bin: int32 max_token_length, then per token a float32 score, an int32
// length and the bytes. vocab_size comes from the model header; 0 reads tokens up to the
// end of the file. Id 0 is <unk>, 1 <s>, 2 </s>, "<0xXX>" tokens are bytes; spaces are
// stored as "▁" in the spec.
Result<TokenizerSpec> load_llama2c_tokenizer(const std::string& path, int32_t vocab_size = 0);

// A Hugging Face tokenizer folder: tokenizer.json (model type BPE) and, when present,
// tokenizer_config.json (bos/eos, add_bos_token, add_eos_token, chat_template).
Result<TokenizerSpec> load_hf_tokenizer(const std::string& dir);

// The llama.cpp tokenizer.* keys of a GGUF file (models "llama" and "gpt2").
Result<TokenizerSpec> spec_from_gguf(const model::GgufFile& file);
// Writes the llama.cpp tokenizer.* keys. A metaspace kBpeMerges spec (HF Llama 2) is written
// as model "llama" with the scores it carries (-rank of the merge that makes each token when
// it has none) and its merges.
// Writes what the keys can hold: call check_gguf_tokenizer first. ignore_merges goes to Koi's
// own key koi.tokenizer.ignore_merges (llama.cpp applies it to "llama-bpe" by itself).
void spec_to_gguf(const TokenizerSpec& spec, model::GgufWriter& writer);
// Ok when the GGUF keys hold the tokenizer whole, so that spec_from_gguf of the written file
// encodes every text as `spec` does. Otherwise kUnsupported naming the component GGUF cannot
// hold: a Unigram model, a pipeline step other than the ones the llama.cpp tokenizers imply
// (normalizer 'NFKC', pre_tokenizer 'Digits', ...), a TemplateProcessing with more than
// BOS/EOS, added tokens with lstrip/rstrip.
Status check_gguf_tokenizer(const TokenizerSpec& spec);

// Any of the above by path: a folder (tokenizer.json), a .gguf file, or a llama2.c
// tokenizer.bin.
Result<Tokenizer> load_tokenizer(const std::string& path, int32_t vocab_size = 0);

}  // namespace koi::tokenizer
