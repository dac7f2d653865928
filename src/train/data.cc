#include "train/data.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "base/check.h"
#include "base/random.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::train {

CharVocab CharVocab::from_texts(const std::vector<std::string_view>& texts) {
  bool ascii[128] = {};  // most characters: no set lookup
  std::set<std::string_view> others;
  for (std::string_view text : texts) {
    for (size_t pos = 0; pos < text.size();) {
      const size_t len = tokenizer::utf8_piece_len(text, pos);
      const auto byte = static_cast<unsigned char>(text[pos]);
      if (len == 1 && byte < 128) {
        ascii[byte] = true;
      } else {
        others.insert(text.substr(pos, len));
      }
      pos += len;
    }
  }
  // Byte order of UTF-8 is code-point order: ASCII first, then the set's order.
  std::vector<std::string> chars;
  for (int byte = 0; byte < 128; ++byte) {
    if (ascii[byte]) chars.emplace_back(1, static_cast<char>(byte));
  }
  chars.insert(chars.end(), others.begin(), others.end());
  return CharVocab(std::move(chars));
}

Result<std::vector<int32_t>> CharVocab::encode(std::string_view text) const {
  int32_t ascii[128];
  std::fill(std::begin(ascii), std::end(ascii), -1);
  std::map<std::string_view, int32_t> others;
  for (size_t i = 0; i < chars_.size(); ++i) {
    const auto byte = static_cast<unsigned char>(chars_[i][0]);
    if (chars_[i].size() == 1 && byte < 128) {
      ascii[byte] = static_cast<int32_t>(i);
    } else {
      others[chars_[i]] = static_cast<int32_t>(i);
    }
  }
  std::vector<int32_t> out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    const size_t len = tokenizer::utf8_piece_len(text, pos);
    const std::string_view ch = text.substr(pos, len);
    const auto byte = static_cast<unsigned char>(ch[0]);
    int32_t id = -1;
    if (len == 1 && byte < 128) {
      id = ascii[byte];
    } else if (auto it = others.find(ch); it != others.end()) {
      id = it->second;
    }
    if (id < 0) {
      return Status::invalid_argument("character '" + std::string(ch) + "' at byte " + std::to_string(pos) +
                                      " is not in the character vocabulary of " + std::to_string(chars_.size()) +
                                      " characters; build the vocabulary from a corpus that contains it");
    }
    out.push_back(id);
    pos += len;
  }
  return out;
}

tokenizer::TokenizerSpec CharVocab::to_spec() const {
  tokenizer::TokenizerSpec spec;
  spec.kind = tokenizer::TokenizerKind::kSentencePiece;
  spec.add_space_prefix = false;
  spec.add_bos = false;
  for (const std::string& ch : chars_) {
    spec.tokens.push_back(ch == " " ? "\u2581" : ch);
    spec.types.push_back(tokenizer::TokenType::kNormal);
  }
  for (int b = 0; b < 256; ++b) {
    spec.tokens.push_back(tokenizer::byte_token_text(static_cast<uint8_t>(b)));
    spec.types.push_back(tokenizer::TokenType::kByte);
  }
  spec.scores.assign(spec.tokens.size(), 0.0f);
  return spec;
}

std::string tokenizer_identity(const tokenizer::TokenizerSpec& spec) {
  std::string id = "spec\n";
  auto add = [&](std::string_view field) {
    id += field;
    id += '\0';
  };
  add(std::to_string(static_cast<int>(spec.kind)));
  add(std::to_string(spec.byte_level) + std::to_string(spec.ignore_merges) + std::to_string(spec.add_space_prefix));
  add(spec.pre);
  for (const std::string& regex : spec.pre_regexes) add(regex);
  add(tokenizer::pipeline_identity(spec));
  add("tokens");
  for (const std::string& token : spec.tokens) add(token);
  for (tokenizer::TokenType type : spec.types) id += static_cast<char>(type);
  id.append(reinterpret_cast<const char*>(spec.scores.data()), spec.scores.size() * sizeof(float));
  add("merges");
  for (const std::string& merge : spec.merges) add(merge);
  return id;
}

std::string tokenizer_identity(const CharVocab& vocab) {
  std::string id = "char\n";
  for (const std::string& ch : vocab.chars()) id += ch + '\0';
  return id;
}

uint64_t shard_key(const std::vector<std::string_view>& texts, std::string_view tokenizer_identity) {
  XXH3_state_t* state = XXH3_createState();
  XXH3_64bits_reset(state);
  for (std::string_view text : texts) {
    const uint64_t size = text.size();
    XXH3_64bits_update(state, &size, sizeof(size));
    XXH3_64bits_update(state, text.data(), text.size());
  }
  XXH3_64bits_update(state, tokenizer_identity.data(), tokenizer_identity.size());
  const uint64_t key = XXH3_64bits_digest(state);
  XXH3_freeState(state);
  return key;
}

namespace {

static_assert(std::endian::native == std::endian::little, "token shards are little-endian");

constexpr char kShardMagic[8] = {'K', 'O', 'I', 'T', 'O', 'K', '0', '1'};
constexpr uint32_t kShardVersion = 1;

struct ShardHeader {
  char magic[8];
  uint32_t version;
  uint32_t token_bytes;
  uint64_t key;
  uint64_t count;
  uint32_t index;
  uint32_t last;
  uint32_t max_token;
  uint32_t zero;
};
static_assert(sizeof(ShardHeader) == 48);

std::string shard_path(const std::string& dir, uint32_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "tokens-%05u.bin", index);
  return path_join(dir, name);
}

uint32_t token_at(const uint8_t* tokens, uint32_t token_bytes, uint64_t i) {
  if (token_bytes == 2) return reinterpret_cast<const uint16_t*>(tokens)[i];
  return reinterpret_cast<const uint32_t*>(tokens)[i];
}

// Collects tokens in the shards' width and writes a shard whenever more than shard_tokens
// are pending, so that the last shard (written by finish()) is known to be the last.
class ShardSink {
 public:
  ShardSink(std::string dir, uint64_t key, uint32_t token_bytes, int64_t shard_tokens)
      : dir_(std::move(dir)),
        key_(key),
        token_bytes_(token_bytes),
        shard_tokens_(static_cast<uint64_t>(shard_tokens)) {}

  Status add(const std::vector<int32_t>& ids) {
    for (int32_t id : ids) {
      const auto token = static_cast<uint32_t>(id);
      const size_t at = pending_.size();
      pending_.resize(at + token_bytes_);
      if (token_bytes_ == 2) {
        const auto narrow = static_cast<uint16_t>(token);
        std::memcpy(pending_.data() + at, &narrow, 2);
      } else {
        std::memcpy(pending_.data() + at, &token, 4);
      }
    }
    tokens_ += ids.size();
    while (pending() > shard_tokens_) KOI_RETURN_IF_ERROR(write(shard_tokens_, /*last=*/false));
    return ok_status();
  }
  Status finish() { return write(pending(), /*last=*/true); }
  uint64_t tokens() const { return tokens_; }
  uint32_t shards() const { return index_; }

 private:
  uint64_t pending() const { return pending_.size() / token_bytes_; }

  Status write(uint64_t count, bool last) {
    ShardHeader h{};
    std::memcpy(h.magic, kShardMagic, sizeof(kShardMagic));
    h.version = kShardVersion;
    h.token_bytes = token_bytes_;
    h.key = key_;
    h.count = count;
    h.index = index_;
    h.last = last ? 1 : 0;
    for (uint64_t i = 0; i < count; ++i) {
      h.max_token = std::max(h.max_token, token_at(pending_.data(), token_bytes_, i));
    }
    const std::string path = shard_path(dir_, index_++);
    KOI_ASSIGN_OR_RETURN(AtomicFileWriter file, AtomicFileWriter::create(path));
    KOI_RETURN_IF_ERROR(file.append(&h, sizeof(h)));
    KOI_RETURN_IF_ERROR(file.append(pending_.data(), count * token_bytes_));
    KOI_RETURN_IF_ERROR(file.commit());
    pending_.erase(pending_.begin(), pending_.begin() + static_cast<std::ptrdiff_t>(count * token_bytes_));
    return ok_status();
  }

  std::string dir_;
  uint64_t key_;
  uint32_t token_bytes_;
  uint64_t shard_tokens_;
  std::vector<uint8_t> pending_;
  uint64_t tokens_ = 0;
  uint32_t index_ = 0;
};

// End of the chunk of text that starts at begin: the first safe cut (no pre-tokenizer joins
// the bytes on either side) at or after begin + chunk_bytes, or the end of the text.
size_t chunk_end(std::string_view text, size_t begin, size_t chunk_bytes) {
  return tokenizer::next_safe_cut(text, begin + std::max<size_t>(chunk_bytes, 1));
}

Status corrupt_shard(const std::string& path, const std::string& what) {
  return Status::corrupt(path + ": " + what + "; delete it (or its directory) to tokenize the corpus again");
}

}  // namespace

Status write_token_shards(const std::string& dir, uint64_t key, const std::vector<MappedFile>& texts,
                          const EncodeFn& encode, int n_vocab, const ShardOptions& options) {
  KOI_CHECK(options.shard_tokens > 0);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::io_error(dir + ": cannot create the token shard directory: " + ec.message());
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.starts_with("tokens-") && name.ends_with(".bin")) remove_all(entry.path().string());
  }
  const auto start = std::chrono::steady_clock::now();
  const uint32_t token_bytes = n_vocab <= 65536 ? 2 : 4;
  ShardSink sink(dir, key, token_bytes, options.shard_tokens);
  uint64_t total = 0, done = 0;
  for (const MappedFile& text : texts) total += text.size();
  const bool large = total > options.chunk_bytes;
  uint64_t reported_tenths = 0;
  for (size_t text_idx = 0; text_idx < texts.size(); ++text_idx) {
    const std::string_view text = texts[text_idx].view();
    for (size_t begin = 0; begin < text.size();) {
      const size_t end = chunk_end(text, begin, options.chunk_bytes);
      Result<std::vector<int32_t>> ids = encode(text.substr(begin, end - begin), begin == 0);
      if (!ids.ok()) {
        return ids.status().with_prefix(texts[text_idx].path() + ", chunk at byte " + std::to_string(begin));
      }
      for (int32_t id : *ids) {
        if (id < 0 || id >= n_vocab) {
          return Status::invalid_argument(texts[text_idx].path() + ": the tokenizer gave token id " +
                                          std::to_string(id) + ", outside its vocabulary of " + std::to_string(n_vocab));
        }
      }
      KOI_RETURN_IF_ERROR(sink.add(*ids));
      done += end - begin;
      begin = end;
      if (large && done * 10 / total > reported_tenths) {
        reported_tenths = done * 10 / total;
        std::fprintf(stderr, "tokenizing: %3llu%% of %.1f MB, %llu tokens\n",
                     static_cast<unsigned long long>(reported_tenths * 10), static_cast<double>(total) / 1e6,
                     static_cast<unsigned long long>(sink.tokens()));
      }
    }
  }
  KOI_RETURN_IF_ERROR(sink.finish());
  std::fprintf(stderr, "tokenized %.1f MB into %llu tokens: %u shard%s of uint%u in %s (%.1f s)\n",
               static_cast<double>(total) / 1e6, static_cast<unsigned long long>(sink.tokens()), sink.shards(),
               sink.shards() == 1 ? "" : "s", token_bytes * 8, dir.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  return ok_status();
}

Result<TokenShards> TokenShards::open(const std::string& dir, uint64_t key) {
  TokenShards s;
  for (uint32_t index = 0;; ++index) {
    const std::string path = shard_path(dir, index);
    if (!file_exists(path)) {
      return Status::not_found(index == 0 ? dir + ": no token shards"
                                          : path + ": missing; the shards of an interrupted tokenization");
    }
    KOI_ASSIGN_OR_RETURN(MappedFile file, MappedFile::open(path));
    ShardHeader h;
    if (file.size() < sizeof(h)) {
      return corrupt_shard(path, "truncated token shard: " + std::to_string(file.size()) + " bytes, less than the " +
                                     std::to_string(sizeof(h)) + "-byte header");
    }
    std::memcpy(&h, file.data(), sizeof(h));
    if (std::memcmp(h.magic, kShardMagic, sizeof(kShardMagic)) != 0) {
      return corrupt_shard(path, "not a Koi token shard (no KOITOK01 magic)");
    }
    if (h.version != kShardVersion) {
      return corrupt_shard(path, "token shard version " + std::to_string(h.version) + "; this Koi reads version 1");
    }
    if (h.key != key) return Status::not_found(path + ": tokens of another corpus or tokenizer");
    if ((h.token_bytes != 2 && h.token_bytes != 4) || h.index != index) {
      return corrupt_shard(path, "bad token shard header (token bytes " + std::to_string(h.token_bytes) + ", index " +
                                     std::to_string(h.index) + ")");
    }
    const uint64_t expected = sizeof(h) + h.count * h.token_bytes;
    if (file.size() != expected) {
      return corrupt_shard(path, "truncated or damaged token shard: the header says " + std::to_string(h.count) +
                                     " tokens (" + std::to_string(expected) + " bytes) but the file has " +
                                     std::to_string(file.size()) + " bytes");
    }
    if (h.count > 0) s.max_token_ = std::max(s.max_token_, static_cast<int32_t>(h.max_token));
    s.shards_.push_back({std::move(file), s.size_, h.count, h.token_bytes});
    s.size_ += h.count;
    if (h.last != 0) return s;
  }
}

void TokenShards::read(uint64_t offset, int64_t n, int32_t* out) const {
  KOI_CHECK(offset + static_cast<uint64_t>(n) <= size_);
  // The last shard whose first token is at or before offset.
  auto shard = std::upper_bound(shards_.begin(), shards_.end(), offset,
                                [](uint64_t o, const Shard& s) { return o < s.first; }) - 1;
  while (n > 0) {
    const uint64_t in_shard = offset - shard->first;
    const int64_t take = std::min<int64_t>(n, static_cast<int64_t>(shard->count - in_shard));
    const uint8_t* tokens = shard->file.data() + sizeof(ShardHeader);
    for (int64_t i = 0; i < take; ++i) {
      *out++ = static_cast<int32_t>(token_at(tokens, shard->token_bytes, in_shard + static_cast<uint64_t>(i)));
    }
    offset += static_cast<uint64_t>(take), n -= take;
    ++shard;
  }
}

BatchLoader::BatchLoader(TokenRange tokens, int B, int T, uint64_t seed)
    : tokens_(tokens), B_(B), T_(T), seed_(seed), window_(static_cast<size_t>(T) + 1) {
  KOI_CHECK(tokens.size() > static_cast<uint64_t>(T));
}

void BatchLoader::next(int32_t* inputs, int32_t* targets) {
  Rng rng(seed_ * 0x9E3779B97F4A7C15ull + position_++);
  const uint64_t range = tokens_.size() - static_cast<uint64_t>(T_);
  for (int b = 0; b < B_; ++b) {
    tokens_.shards->read(tokens_.begin + rng.below(range), T_ + 1, window_.data());
    std::copy_n(window_.data(), T_, inputs + int64_t{b} * T_);
    std::copy_n(window_.data() + 1, T_, targets + int64_t{b} * T_);
  }
}

}  // namespace koi::train
