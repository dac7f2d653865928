#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <array>
#include <queue>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "tokenizer/decoder.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

constexpr std::string_view kSpaceMark = "\xE2\x96\x81";  // "▁"
// llama2.c starts its search for the best pair at this score: lower scores never merge.
constexpr float kMinMergeScore = -1e10f;
// Token names that end a turn in the chat models Koi serves.
constexpr std::array<std::string_view, 8> kEogNames = {
    "<|eot_id|>", "<|eom_id|>", "<|im_end|>", "<|end_of_text|>",
    "<|endoftext|>", "</s>", "<end_of_turn>", "<|end|>"};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using TextMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// A run of text being merged: symbols form a linked list over the text; merging folds the
// right symbol into the left one.
struct Symbol {
  uint32_t start;
  uint32_t len;
  int32_t id;         // -1: not a token (yet)
  bool mergeable;     // false for byte-fallback pieces
  int32_t prev;
  int32_t next;
};

struct Candidate {
  double priority;  // lower merges first
  int32_t left;
  int32_t right;
  uint32_t len;     // left.len + right.len when queued; stale when it differs
  int32_t id;       // the merged token
  bool operator>(const Candidate& o) const {
    return priority != o.priority ? priority > o.priority : left > o.left;
  }
};

// Merges adjacent symbols, best pair first (ties: leftmost), until no pair is left.
// `pair` returns the priority and merged id of two adjacent symbols, or nullopt.
template <typename PairFn>
void merge_symbols(std::vector<Symbol>* syms, PairFn pair) {
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> queue;
  auto try_add = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Symbol& a = (*syms)[left];
    const Symbol& b = (*syms)[right];
    if (!a.mergeable || !b.mergeable) return;
    if (auto p = pair(a, b)) queue.push({p->first, left, right, a.len + b.len, p->second});
  };
  for (size_t i = 0; i + 1 < syms->size(); ++i) try_add(int32_t(i), int32_t(i + 1));
  while (!queue.empty()) {
    Candidate c = queue.top();
    queue.pop();
    Symbol& a = (*syms)[c.left];
    Symbol& b = (*syms)[c.right];
    if (a.len == 0 || b.len == 0 || a.len + b.len != c.len) continue;
    a.len += b.len;
    a.id = c.id;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) (*syms)[b.next].prev = c.left;
    try_add(a.prev, c.left);
    try_add(c.left, a.next);
  }
}

void push_symbol(std::vector<Symbol>* syms, uint32_t start, uint32_t len, int32_t id, bool mergeable) {
  int32_t index = int32_t(syms->size());
  syms->push_back({start, len, id, mergeable, index - 1, -1});
  if (index > 0) (*syms)[index - 1].next = index;
}

struct AddedToken {
  std::string text;
  int32_t id;
  bool special;  // matched only when parsing specials
  bool lstrip, rstrip;
};

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

}  // namespace

struct Tokenizer::Impl {
  TokenizerSpec spec;
  bool space_prefix = false;    // SentencePiece / metaspace leading-space rule
  TextMap text_to_id;           // every token; the first id wins for a duplicate text
  // kSentencePiece: normal and user-defined tokens by their llama2.c text ("▁" as " "):
  // the encoder cuts and byte-falls-back the raw text exactly as llama2.c does.
  TextMap mergeable_to_id;
  std::array<int32_t, 256> byte_ids;  // "<0xXX>" tokens, -1 where missing
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merge_ranks;  // (left,right) -> (rank, merged)
  // kUnigram: every token but unused ones, by text; the longest text in bytes; the score of
  // a character no token covers (the lowest score less 10, as SentencePiece).
  TextMap pieces;
  size_t max_piece_len = 0;
  double unk_score = 0;
  std::optional<Normalizer> normalizer;       // kBpeMerges, kUnigram
  std::optional<PreTokenizer> pre_tokenizer;  // kBpeMerges, kUnigram
  std::optional<Decoder> decoder;
  std::array<std::vector<AddedToken>, 256> added_by_first_byte;  // longest first
  std::vector<bool> is_added;
  std::unordered_set<int32_t> eog;

  void encode_text(std::string_view text, bool first, std::vector<int32_t>* out) const;
  void encode_spm(std::string_view text, bool prefixed, std::vector<int32_t>* out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>* out) const;
  void encode_unigram(std::string_view text, std::vector<int32_t>* out) const;
  void emit_unknown(std::string_view bytes, std::vector<int32_t>* out) const;
  // The tokens add_special puts before and after the text.
  void add_prefix(std::vector<int32_t>* out) const {
    out->insert(out->end(), spec.special_prefix.begin(), spec.special_prefix.end());
    if (spec.special_prefix.empty() && spec.add_bos && spec.bos_id) out->push_back(*spec.bos_id);
  }
  void add_suffix(std::vector<int32_t>* out) const {
    out->insert(out->end(), spec.special_suffix.begin(), spec.special_suffix.end());
    if (spec.special_suffix.empty() && spec.add_eos && spec.eos_id) out->push_back(*spec.eos_id);
  }
};

namespace {

std::string id_error(std::string_view field, int32_t id, size_t n) {
  return std::string(field) + " " + std::to_string(id) + " is outside the vocabulary of " +
         std::to_string(n) + " tokens";
}

NormalizerStep normalizer_step(NormalizerStep::Kind kind, std::string pattern, std::string content) {
  NormalizerStep step;
  step.kind = kind;
  step.pattern = std::move(pattern);
  step.content = std::move(content);
  return step;
}

DecoderStep decoder_step(DecoderStep::Kind kind, std::string pattern = "", std::string content = "") {
  DecoderStep step;
  step.kind = kind;
  step.pattern = std::move(pattern);
  step.content = std::move(content);
  return step;
}

}  // namespace

// SentencePiece (kSentencePiece) encodes by its own rules and decodes like metaspace text.
Status derive_pipeline(const TokenizerSpec& spec, bool space_prefix, Pipeline* out) {
  if (spec.kind == TokenizerKind::kBpeMerges && spec.byte_level) {
    std::vector<std::string> patterns = spec.pre_regexes;
    if (patterns.empty()) {
      auto table = pre_tokenizer_regexes(spec.pre);
      if (!table) {
        return Status::unsupported("pre-tokenizer '" + spec.pre +
                                   "' is not known to Koi (known: llama-bpe, qwen2, gpt2, default)");
      }
      patterns = *table;
    }
    for (const std::string& regex : patterns) {
      PreTokenizerStep split;
      split.pattern = regex;
      split.regex = true;
      out->pre_tokenizers.push_back(split);
    }
    PreTokenizerStep byte_level;
    byte_level.kind = PreTokenizerStep::Kind::kByteLevel;
    byte_level.use_regex = false;
    out->pre_tokenizers.push_back(byte_level);
    out->decoders.push_back(decoder_step(DecoderStep::Kind::kByteLevel));
    return ok_status();
  }
  if (space_prefix) {
    out->normalizers.push_back(normalizer_step(NormalizerStep::Kind::kPrepend, "", std::string(kSpaceMark)));
  }
  out->normalizers.push_back(normalizer_step(NormalizerStep::Kind::kReplace, " ", std::string(kSpaceMark)));
  out->decoders.push_back(decoder_step(DecoderStep::Kind::kReplace, std::string(kSpaceMark), " "));
  out->decoders.push_back(decoder_step(DecoderStep::Kind::kByteFallback));
  out->decoders.push_back(decoder_step(DecoderStep::Kind::kFuse));
  if (space_prefix) {
    DecoderStep strip = decoder_step(DecoderStep::Kind::kStrip, "", " ");
    strip.start = 1;
    out->decoders.push_back(strip);
  }
  return ok_status();
}

namespace {

// kUnigram tables: the pieces the lattice is built from and the score of an unknown
// character.
void build_unigram(const TokenizerSpec& spec, TextMap* pieces, size_t* max_len, double* unk_score) {
  double min_score = 0;
  for (size_t i = 0; i < spec.tokens.size(); ++i) {
    min_score = std::min(min_score, double(spec.scores[i]));
    // Special tokens are matched as added tokens, never inside text.
    TokenType type = spec.types[i];
    if (type == TokenType::kUnused || type == TokenType::kControl || type == TokenType::kUnknown) continue;
    if (spec.tokens[i].empty()) continue;
    pieces->emplace(spec.tokens[i], int32_t(i));
    *max_len = std::max(*max_len, spec.tokens[i].size());
  }
  *unk_score = min_score - 10.0;
}

// The pieces (start, id) of the segmentation of `text` whose token scores sum highest:
// Viterbi over the character lattice. Ties keep the first best path found (shorter pieces
// are tried first from each start), as Hugging Face. A character no token starts with is
// an unknown piece (id -1) of score unk_score.
std::vector<std::pair<size_t, int32_t>> best_segmentation(std::string_view text, const TextMap& pieces,
                                                          size_t max_piece_len, const std::vector<float>& scores,
                                                          double unk_score) {
  struct Best {
    double score = 0;
    int64_t start = -1;  // -1: not reached
    int32_t id = -1;     // -1: an unknown piece
  };
  const size_t n = text.size();
  std::vector<Best> best(n + 1);
  best[0].start = 0;
  auto offer = [&](size_t from, size_t to, double score, int32_t id) {
    double candidate = best[from].score + score;
    if (best[to].start < 0 || candidate > best[to].score) best[to] = {candidate, int64_t(from), id};
  };
  for (size_t pos = 0; pos < n; pos += utf8_piece_len(text, pos)) {
    if (best[pos].start < 0) continue;
    const size_t char_len = utf8_piece_len(text, pos);
    bool has_single = false;
    for (size_t len = char_len; len <= max_piece_len && pos + len <= n; len += utf8_piece_len(text, pos + len)) {
      auto it = pieces.find(text.substr(pos, len));
      if (it == pieces.end()) continue;
      offer(pos, pos + len, scores[it->second], it->second);
      has_single = has_single || len == char_len;
    }
    if (!has_single) offer(pos, pos + char_len, unk_score, -1);
  }
  std::vector<std::pair<size_t, int32_t>> path;
  for (size_t end = n; end > 0; end = size_t(best[end].start)) path.emplace_back(size_t(best[end].start), best[end].id);
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace

Result<Tokenizer> Tokenizer::create(TokenizerSpec spec) {
  auto impl = std::make_shared<Impl>();
  const size_t n = spec.tokens.size();
  if (n == 0) return Status::invalid_argument("tokenizer has no tokens");
  if (spec.types.empty()) spec.types.assign(n, TokenType::kNormal);
  if (spec.types.size() != n) {
    return Status::invalid_argument("tokenizer has " + std::to_string(n) + " tokens but " +
                                    std::to_string(spec.types.size()) + " token types");
  }
  if (spec.kind != TokenizerKind::kBpeMerges && spec.scores.size() != n) {
    return Status::invalid_argument(std::string(spec.kind == TokenizerKind::kUnigram ? "Unigram" : "SentencePiece") +
                                    " tokenizer has " + std::to_string(n) +
                                    " tokens but " + std::to_string(spec.scores.size()) + " scores");
  }
  for (auto [field, id] : {std::pair{"bos_id", spec.bos_id}, {"eos_id", spec.eos_id},
                           {"unk_id", spec.unk_id}, {"pad_id", spec.pad_id}}) {
    if (id && (*id < 0 || size_t(*id) >= n)) return Status::invalid_argument(id_error(field, *id, n));
  }
  for (int32_t id : spec.eog_ids) {
    if (id < 0 || size_t(id) >= n) return Status::invalid_argument(id_error("eog id", id, n));
  }

  impl->byte_ids.fill(-1);
  impl->is_added.assign(n, false);
  impl->text_to_id.reserve(n);
  impl->mergeable_to_id.reserve(n);
  impl->merge_ranks.reserve(spec.merges.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string& text = spec.tokens[i];
    int32_t id = int32_t(i);
    impl->text_to_id.emplace(text, id);
    TokenType type = spec.types[i];
    if (type == TokenType::kNormal || type == TokenType::kUserDefined) {
      impl->mergeable_to_id.emplace(replace_all(text, kSpaceMark, " "), id);
    }
    if (type == TokenType::kByte) {
      int byte = parse_byte_token(text);
      if (byte < 0) {
        return Status::invalid_argument("token " + std::to_string(i) + " '" + text +
                                        "' has type byte but is not of the form <0xXX>");
      }
      if (impl->byte_ids[byte] < 0) impl->byte_ids[byte] = id;
    }
    bool added = type == TokenType::kControl || type == TokenType::kUnknown ||
                 type == TokenType::kUserDefined;
    if (added && !text.empty()) {
      impl->is_added[i] = true;
      impl->added_by_first_byte[uint8_t(text[0])].push_back(
          {text, id, type != TokenType::kUserDefined, spec.lstrip_ids.count(id) > 0,
           spec.rstrip_ids.count(id) > 0});
    }
    if (type == TokenType::kControl &&
        std::find(kEogNames.begin(), kEogNames.end(), text) != kEogNames.end()) {
      impl->eog.insert(id);
    }
  }
  for (auto& bucket : impl->added_by_first_byte) {
    std::stable_sort(bucket.begin(), bucket.end(),
                     [](const AddedToken& a, const AddedToken& b) { return a.text.size() > b.text.size(); });
  }
  if (spec.eos_id) impl->eog.insert(*spec.eos_id);
  impl->eog.insert(spec.eog_ids.begin(), spec.eog_ids.end());

  if (spec.kind == TokenizerKind::kBpeMerges) {
    for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
      const std::string& merge = spec.merges[rank];
      size_t space = merge.find(' ', 1);
      auto fail = [&](std::string_view why) {
        return Status::invalid_argument("merge " + std::to_string(rank) + " '" + merge + "' " +
                                        std::string(why));
      };
      if (space == std::string::npos) return fail("is not of the form 'left right'");
      std::string left = merge.substr(0, space);
      std::string right = merge.substr(space + 1);
      auto l = impl->text_to_id.find(left);
      auto r = impl->text_to_id.find(right);
      auto m = impl->text_to_id.find(left + right);
      if (l == impl->text_to_id.end() || r == impl->text_to_id.end() || m == impl->text_to_id.end()) {
        return fail("names a token that is not in the vocabulary");
      }
      uint64_t key = (uint64_t(uint32_t(l->second)) << 32) | uint32_t(r->second);
      impl->merge_ranks.emplace(key, std::pair{int32_t(rank), m->second});
    }
  }
  impl->space_prefix = spec.add_space_prefix &&
                       (spec.kind == TokenizerKind::kSentencePiece || !spec.byte_level);
  Pipeline pipeline{spec.normalizers, spec.pre_tokenizers, spec.decoders};
  if (!spec.pipeline) KOI_RETURN_IF_ERROR(derive_pipeline(spec, impl->space_prefix, &pipeline));
  if (spec.kind == TokenizerKind::kUnigram) {
    if (!spec.pipeline) return Status::invalid_argument("a Unigram tokenizer needs its Hugging Face pipeline");
    build_unigram(spec, &impl->pieces, &impl->max_piece_len, &impl->unk_score);
  }
  KOI_ASSIGN_OR_RETURN(impl->normalizer, Normalizer::create(pipeline.normalizers));
  KOI_ASSIGN_OR_RETURN(impl->pre_tokenizer, PreTokenizer::create(pipeline.pre_tokenizers));
  KOI_ASSIGN_OR_RETURN(impl->decoder, Decoder::create(pipeline.decoders));
  for (int32_t id : spec.special_prefix) {
    if (id < 0 || size_t(id) >= n) return Status::invalid_argument(id_error("special_prefix id", id, n));
  }
  for (int32_t id : spec.special_suffix) {
    if (id < 0 || size_t(id) >= n) return Status::invalid_argument(id_error("special_suffix id", id, n));
  }
  for (const TemplateItem& item : spec.pair_template) {
    for (int32_t id : item.tokens) {
      if (id < 0 || size_t(id) >= n) return Status::invalid_argument(id_error("pair template token id", id, n));
    }
  }
  impl->spec = std::move(spec);
  return Tokenizer(std::move(impl));
}

void Tokenizer::Impl::emit_unknown(std::string_view bytes, std::vector<int32_t>* out) const {
  bool all_bytes = std::all_of(bytes.begin(), bytes.end(),
                               [&](char c) { return byte_ids[uint8_t(c)] >= 0; });
  if (all_bytes) {
    for (char c : bytes) out->push_back(byte_ids[uint8_t(c)]);
  } else if (spec.unk_id) {
    out->push_back(*spec.unk_id);
  }
}

// llama2.c's encode(): each character (or invalid byte group) becomes a token or byte
// tokens, then the adjacent pair whose concatenation has the best score merges, repeatedly.
// `prefixed`: text starts with the dummy-prefix space, a piece of its own.
void Tokenizer::Impl::encode_spm(std::string_view text, bool prefixed, std::vector<int32_t>* out) const {
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = pos == 0 && prefixed ? 1 : utf8_piece_len(text, pos);
    auto it = mergeable_to_id.find(text.substr(pos, len));
    if (it != mergeable_to_id.end()) {
      push_symbol(&syms, uint32_t(pos), uint32_t(len), it->second, true);
    } else {
      for (size_t b = 0; b < len; ++b) {
        int32_t id = byte_ids[uint8_t(text[pos + b])];
        push_symbol(&syms, uint32_t(pos + b), 1, id >= 0 ? id : spec.unk_id.value_or(-1), false);
      }
    }
    pos += len;
  }
  merge_symbols(&syms, [&](const Symbol& a, const Symbol& b) -> std::optional<std::pair<double, int32_t>> {
    auto it = mergeable_to_id.find(text.substr(a.start, a.len + b.len));
    if (it == mergeable_to_id.end() || !(spec.scores[it->second] > kMinMergeScore)) return std::nullopt;
    return std::pair{-double(spec.scores[it->second]), it->second};
  });
  for (const Symbol& s : syms) {
    if (s.len > 0 && s.id >= 0) out->push_back(s.id);
  }
}

// Rank-ordered BPE over the characters of one pre-token.
void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>* out) const {
  if (spec.ignore_merges) {
    auto it = text_to_id.find(text);
    if (it != text_to_id.end()) {
      out->push_back(it->second);
      return;
    }
  }
  std::vector<Symbol> syms;
  for (size_t pos = 0; pos < text.size();) {
    size_t len = utf8_piece_len(text, pos);
    auto it = text_to_id.find(text.substr(pos, len));
    push_symbol(&syms, uint32_t(pos), uint32_t(len), it == text_to_id.end() ? -1 : it->second, true);
    pos += len;
  }
  merge_symbols(&syms, [&](const Symbol& a, const Symbol& b) -> std::optional<std::pair<double, int32_t>> {
    if (a.id < 0 || b.id < 0) return std::nullopt;
    auto it = merge_ranks.find((uint64_t(uint32_t(a.id)) << 32) | uint32_t(b.id));
    if (it == merge_ranks.end()) return std::nullopt;
    return std::pair{double(it->second.first), it->second.second};
  });
  for (const Symbol& s : syms) {
    if (s.len == 0) continue;
    if (s.id >= 0) {
      out->push_back(s.id);
    } else if (spec.byte_level && !spec.pipeline) {
      if (spec.unk_id) out->push_back(*spec.unk_id);
    } else {
      emit_unknown(text.substr(s.start, s.len), out);
    }
  }
}

// SentencePiece unigram: the best-scoring segmentation of `text`; adjacent unknown pieces
// fuse, then fall back to byte tokens or <unk>.
void Tokenizer::Impl::encode_unigram(std::string_view text, std::vector<int32_t>* out) const {
  std::vector<std::pair<size_t, int32_t>> path = best_segmentation(text, pieces, max_piece_len, spec.scores, unk_score);
  for (size_t i = 0; i < path.size(); ++i) {
    if (path[i].second >= 0) {
      out->push_back(path[i].second);
      continue;
    }
    size_t last = i;
    while (last + 1 < path.size() && path[last + 1].second < 0) ++last;
    size_t stop = last + 1 < path.size() ? path[last + 1].first : text.size();
    emit_unknown(text.substr(path[i].first, stop - path[i].first), out);
    i = last;
  }
}

// One piece of raw text between added tokens; first: it starts the input.
void Tokenizer::Impl::encode_text(std::string_view text, bool first, std::vector<int32_t>* out) const {
  if (spec.kind == TokenizerKind::kSentencePiece) {
    std::string prefixed = space_prefix ? " " + std::string(text) : std::string(text);
    encode_spm(prefixed, space_prefix, out);
    return;
  }
  std::string normalized = normalizer->normalize(text);
  std::vector<std::string> pieces;
  pre_tokenizer->pre_tokenize(normalized, first, &pieces);
  for (const std::string& piece : pieces) {
    if (spec.kind == TokenizerKind::kUnigram) {
      encode_unigram(piece, out);
    } else {
      encode_bpe(piece, out);
    }
  }
}

PairEncoding Tokenizer::encode_pair(std::string_view a, std::string_view b, bool add_special, bool parse_special) const {
  // Each sequence is encoded on its own, as Hugging Face does, then placed by the template.
  const std::vector<int32_t> ids_a = encode(a, false, parse_special);
  const std::vector<int32_t> ids_b = encode(b, false, parse_special);
  const std::vector<TemplateItem> plain{{{}, 'A', 0}, {{}, 'B', 1}};
  PairEncoding out;
  for (const TemplateItem& item : add_special ? pair_template(impl_->spec) : plain) {
    const std::vector<int32_t>& ids = !item.tokens.empty() ? item.tokens : item.sequence == 'A' ? ids_a : ids_b;
    out.ids.insert(out.ids.end(), ids.begin(), ids.end());
    out.type_ids.insert(out.type_ids.end(), ids.size(), item.type_id);
  }
  return out;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& im = *impl_;
  std::vector<int32_t> out;
  if (add_special) im.add_prefix(&out);
  size_t start = 0;  // of the raw text not yet encoded
  size_t pos = 0;
  while (pos < text.size()) {
    const AddedToken* match = nullptr;
    for (const AddedToken& t : im.added_by_first_byte[uint8_t(text[pos])]) {
      if ((parse_special || !t.special) && text.substr(pos, t.text.size()) == t.text) {
        match = &t;
        break;
      }
    }
    if (match == nullptr) {
      ++pos;
      continue;
    }
    size_t end = pos;
    if (match->lstrip) {
      while (end > start && is_space(text[end - 1])) --end;
    }
    if (end > start) im.encode_text(text.substr(start, end - start), start == 0, &out);
    out.push_back(match->id);
    pos += match->text.size();
    if (match->rstrip) {
      while (pos < text.size() && is_space(text[pos])) ++pos;
    }
    start = pos;
  }
  if (start < text.size()) im.encode_text(text.substr(start), start == 0, &out);
  if (add_special) im.add_suffix(&out);
  return out;
}

void Tokenizer::append_piece(int32_t id, int32_t prev, bool skip_special, std::string* out) const {
  const Impl& im = *impl_;
  if (id < 0 || id >= n_vocab()) return;
  const std::string& text = im.spec.tokens[id];
  switch (im.spec.types[id]) {
    case TokenType::kByte:
      *out += char(parse_byte_token(text));
      return;
    case TokenType::kControl:
      if (!skip_special) *out += text;
      return;
    case TokenType::kNormal:
    case TokenType::kUserDefined:
      break;
    default:
      *out += text;
      return;
  }
  // The encoder started a piece of raw text here (where a space prefix went).
  bool at_text_start = prev < 0 || (prev < n_vocab() && im.is_added[prev]);
  im.decoder->decode_piece(text, at_text_start, out);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  std::string out;
  int32_t prev = -1;
  for (int32_t id : ids) {
    append_piece(id, prev, skip_special, &out);
    prev = id;
  }
  return out;
}

const std::string& Tokenizer::token_text(int32_t id) const {
  static const std::string kEmpty;
  return id >= 0 && id < n_vocab() ? impl_->spec.tokens[id] : kEmpty;
}

TokenType Tokenizer::token_type(int32_t id) const {
  return id >= 0 && id < n_vocab() ? impl_->spec.types[id] : TokenType::kUnused;
}

int32_t Tokenizer::n_vocab() const { return int32_t(impl_->spec.tokens.size()); }
std::optional<int32_t> Tokenizer::bos_id() const { return impl_->spec.bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->spec.eos_id; }
bool Tokenizer::is_eog(int32_t id) const { return impl_->eog.count(id) > 0; }
const TokenizerSpec& Tokenizer::spec() const { return impl_->spec; }

}  // namespace koi::tokenizer
