// Loaders: every tokenizer source Koi reads, turned into a TokenizerSpec, and the way back
// into GGUF metadata. Plain functions, thread-safe; each failure is a Status whose message
// names the file (and the field) and says what to do.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

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
// The same from the two files' text (a GGUF's koi.tokenizer.json keys); `where` prefixes errors.
Result<TokenizerSpec> hf_tokenizer_from_text(std::string_view tokenizer_json, std::string_view config_json,
                                             const std::string& where);

// The llama.cpp tokenizer.* keys of a GGUF file (models "llama" and "gpt2").
Result<TokenizerSpec> spec_from_gguf(const model::GgufFile& file);
// Writes the llama.cpp tokenizer.* keys. A metaspace kBpeMerges spec (HF Llama 2) is written
// as model "llama" with the scores it carries (-rank of the merge that makes each token when
// it has none) and its merges.
// ignore_merges goes to Koi's own key koi.tokenizer.ignore_merges (llama.cpp applies it to
// "llama-bpe" by itself). When the llama.cpp keys cannot hold the tokenizer whole
// (check_gguf_tokenizer fails), the file also carries the whole pipeline as Koi's keys
// koi.tokenizer.json and koi.tokenizer.config_json (hf_writer.h's two files), which
// spec_from_gguf reads in preference: Koi reads back exactly `spec`; llama.cpp reads the
// llama.cpp keys and encodes differently where check_gguf_tokenizer says (callers warn).
Status spec_to_gguf(const TokenizerSpec& spec, model::GgufWriter& writer);
// Ok when the llama.cpp GGUF keys hold the tokenizer whole, so that a reader of those keys
// alone (llama.cpp) encodes every text as `spec` does. Otherwise kUnsupported naming the
// component they cannot hold: a Unigram model, a pipeline step other than the ones the
// llama.cpp tokenizers imply (normalizer 'NFKC', pre_tokenizer 'Digits', ...), a
// TemplateProcessing with more than BOS/EOS, added tokens with lstrip/rstrip.
Status check_gguf_tokenizer(const TokenizerSpec& spec);

// Any of the above by path: a folder (tokenizer.json), a .gguf file, or a llama2.c
// tokenizer.bin.
Result<Tokenizer> load_tokenizer(const std::string& path, int32_t vocab_size = 0);

}  // namespace koi::tokenizer
