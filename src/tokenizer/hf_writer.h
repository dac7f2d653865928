// The way out to Hugging Face: any TokenizerSpec Koi produces as tokenizer.json +
// tokenizer_config.json, which load_hf_tokenizer (load.h) reads back into a tokenizer that
// encodes every text the same, and which Hugging Face tokenizers (and their JavaScript port)
// read as model type "BPE":
//  - byte-level kBpeMerges (GPT-2, Llama 3, Qwen2, bpe_trainer.h): Split(regex) per
//    pre-tokenizer regex + ByteLevel, ByteLevel decoder;
//  - metaspace kBpeMerges (HF Llama 2): normalizer Prepend("▁") + Replace(" ", "▁") (only
//    the Replace without the space prefix), byte_fallback, the Llama 2 decoder;
//  - kSentencePiece (llama2.c, CharVocab::to_spec, GGUF "llama"): converted by
//    sentencepiece_to_bpe into the metaspace form first.
//  - a spec read from tokenizer.json (spec.pipeline): its own pipeline step for step (every
//    normalizer, pre-tokenizer and decoder of spec.h), model BPE or Unigram, so that reading
//    the file back encodes and decodes every text as the spec does.
// Control, unknown and user-defined tokens become added_tokens; the tokens encode adds (BOS/
// EOS, special_prefix/suffix) and the pair template become a TemplateProcessing
// post-processor, with add_bos_token/add_eos_token in the config.
//
// Plain functions, thread-safe. A spec that tokenizer.json cannot express exactly is refused
// with a Status saying why (duplicate token texts, invalid UTF-8, tied SentencePiece scores,
// missing byte tokens, an unknown pre-tokenizer).
#pragma once

#include <string>

#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::tokenizer {

// A kSentencePiece spec as a metaspace kBpeMerges spec that encodes the same: the merges
// are, for every normal token whose score lets it merge, each split of its text into two
// normal tokens, ranked by the token's score (best first; Hugging Face's LlamaConverter does
// the same). Exact because SentencePiece merges the pair whose merged token scores best;
// refused when two tokens made by merges share a score (SentencePiece then merges the
// leftmost pair, a merges list cannot say that) or when a byte token is missing (the
// unknown-byte rules differ). Two differences remain, shared with Hugging Face: a literal
// "▁" in the text is a space to the converted tokenizer and three unknown bytes to llama2.c;
// and a stray UTF-8 continuation byte right after a space is cut with the space's bytes
// into byte tokens ("▁" is three bytes where " " was one).
Result<TokenizerSpec> sentencepiece_to_bpe(const TokenizerSpec& spec);

Result<std::string> to_hf_tokenizer_json(const TokenizerSpec& spec);
// bos/eos/unk/pad token texts, add_bos_token/add_eos_token, chat_template.
std::string to_hf_tokenizer_config_json(const TokenizerSpec& spec);
// Writes dir/tokenizer.json and dir/tokenizer_config.json (each atomically); dir must exist.
Status write_hf_tokenizer(const TokenizerSpec& spec, const std::string& dir);

}  // namespace koi::tokenizer
