// Training data: a character vocabulary, token shards on disk and the batch loader.
//
// CharVocab is nanoGPT's shakespeare_char tokenizer: the sorted distinct characters (UTF-8
// code points) of a corpus, one id each, followed by the 256 byte tokens "<0x00>".."<0xFF>"
// so that the exported SentencePiece-style tokenizer can encode any text (bytes of unseen
// characters fall back to them). A plain value; thread-safe to read.
//
// Token shards hold a corpus tokenized once: DIR/tokens-00000.bin, tokens-00001.bin, ...,
// each at most shard_tokens tokens of the corpus's token sequence, in order. A shard is a
// 48-byte little-endian header, then the tokens:
//   magic "KOITOK01" | u32 version (1) | u32 token bytes (2: uint16 when n_vocab <= 65536,
//   else 4: uint32) | u64 key | u64 token count | u32 shard index | u32 last (1 on the last
//   shard) | u32 largest token id | u32 zero
// The key hashes the corpus bytes and the tokenizer's identity (shard_key), so a changed
// corpus or tokenizer is tokenized again. Shards are written atomically (base/file.h), the
// last one last: a crash leaves a set without its last shard, which does not count.
// TokenShards maps a complete set read-only (never copied into memory); safe to read from
// many threads.
//
// BatchLoader draws nanoGPT-style batches from a range of the shards' token sequence: B
// windows of T+1 tokens at uniformly random offsets, inputs = window[0, T), targets =
// window[1, T+1); a window may span two shards. Batch number i depends only on (seed, i)
// and the token sequence (not on how it is cut into shards), so the loader's whole state
// is position() (batches handed out), which a checkpoint saves. Holds a pointer to the
// shards, which must outlive it. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "base/file.h"
#include "base/status.h"
#include "tokenizer/spec.h"

namespace koi::train {

class CharVocab {
 public:
  // The characters of all the texts.
  static CharVocab from_texts(const std::vector<std::string_view>& texts);
  static CharVocab from_text(std::string_view text) { return from_texts({text}); }
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

// What distinguishes one tokenizer's output from another's, for shard_key.
std::string tokenizer_identity(const tokenizer::TokenizerSpec& spec);
std::string tokenizer_identity(const CharVocab& vocab);
// XXH3-64 of the texts (each with its length, in order) and the tokenizer identity.
uint64_t shard_key(const std::vector<std::string_view>& texts, std::string_view tokenizer_identity);

struct ShardOptions {
  int64_t shard_tokens = 100'000'000;  // tokens per shard file at most
  // Text per encode() call: a chunk ends at the first safe cut (tokenizer::next_safe_cut: a
  // line end followed by printable ASCII other than a space) at or after this many bytes.
  size_t chunk_bytes = size_t{1} << 20;
};

// Tokens of one chunk of a text; file_start: the chunk begins a text (a SentencePiece
// tokenizer adds its space prefix there only).
using EncodeFn = std::function<Result<std::vector<int32_t>>(std::string_view chunk, bool file_start)>;

// Tokenizes the texts (each on its own, in order; their tokens concatenated) into dir's
// shards with `key`, replacing any shards there, and prints progress to stderr for a corpus
// of more than one chunk. Tokens must be below n_vocab. Errors name the file.
Status write_token_shards(const std::string& dir, uint64_t key, const std::vector<MappedFile>& texts,
                          const EncodeFn& encode, int n_vocab, const ShardOptions& options = {});

class TokenShards {
 public:
  // The shards of `key` in dir. NotFound when there is no complete set of them (none, an
  // interrupted build, or shards of another corpus or tokenizer: tokenize again); Corrupt,
  // naming the file, when a shard is damaged (truncated, bad header).
  static Result<TokenShards> open(const std::string& dir, uint64_t key);

  uint64_t size() const { return size_; }  // tokens in all shards
  int num_shards() const { return static_cast<int>(shards_.size()); }
  int32_t max_token() const { return max_token_; }  // -1 when there are no tokens
  // out[0, n) = tokens [offset, offset + n) of the sequence; the range must be inside it.
  void read(uint64_t offset, int64_t n, int32_t* out) const;

 private:
  struct Shard {
    MappedFile file;
    uint64_t first = 0;  // offset of its first token in the sequence
    uint64_t count = 0;
    uint32_t token_bytes = 0;
  };
  std::vector<Shard> shards_;
  uint64_t size_ = 0;
  int32_t max_token_ = -1;
};

// Tokens [begin, end) of a set of shards (the train or the validation part).
struct TokenRange {
  const TokenShards* shards = nullptr;
  uint64_t begin = 0, end = 0;
  uint64_t size() const { return end - begin; }
};

class BatchLoader {
 public:
  // tokens.size() must exceed T.
  BatchLoader(TokenRange tokens, int B, int T, uint64_t seed);

  // Fills inputs and targets, (B, T) each, and advances the position.
  void next(int32_t* inputs, int32_t* targets);
  uint64_t position() const { return position_; }
  void set_position(uint64_t position) { position_ = position; }

 private:
  TokenRange tokens_;
  int B_, T_;
  uint64_t seed_;
  uint64_t position_ = 0;
  std::vector<int32_t> window_;  // T + 1 tokens
};

}  // namespace koi::train
