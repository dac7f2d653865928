#include "tokenizer/bpe_trainer.h"

#include <algorithm>
#include <optional>
#include <queue>
#include <unordered_map>

#include "base/thread_pool.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode.h"

namespace koi::tokenizer {
namespace {

constexpr int kByteTokens = 256;
constexpr std::string_view kPre = "llama-bpe";
// Text is split for the counting threads into chunks of about this many bytes at least.
constexpr size_t kMinChunkBytes = size_t{1} << 16;

using WordCounts = std::unordered_map<std::string_view, int64_t>;
using PairKey = uint64_t;

PairKey pair_key(int32_t left, int32_t right) { return (uint64_t(uint32_t(left)) << 32) | uint32_t(right); }
int32_t pair_left(PairKey key) { return int32_t(key >> 32); }
int32_t pair_right(PairKey key) { return int32_t(key & 0xFFFFFFFFu); }

// The pieces of text between occurrences of the special tokens.
std::vector<std::string_view> cut_specials(std::string_view text, const std::vector<std::string>& specials) {
  std::vector<std::string_view> out;
  std::vector<size_t> next;  // the next occurrence of each special at or after pos
  for (const std::string& s : specials) next.push_back(text.find(s));
  size_t pos = 0;
  while (pos < text.size()) {
    size_t best = std::string_view::npos;
    size_t best_len = 0;
    for (size_t i = 0; i < specials.size(); ++i) {
      if (next[i] != std::string_view::npos && next[i] < pos) next[i] = text.find(specials[i], pos);
      if (next[i] < best || (next[i] == best && specials[i].size() > best_len)) {
        best = next[i];
        best_len = specials[i].size();
      }
    }
    if (best == std::string_view::npos) break;
    if (best > pos) out.push_back(text.substr(pos, best - pos));
    pos = best + best_len;
  }
  if (pos < text.size()) out.push_back(text.substr(pos));
  return out;
}

// Cuts a piece of text into chunks of about `target` bytes (target >= 1) that the
// pre-tokenizer splits exactly as it splits the whole (next_safe_cut).
void cut_chunks(std::string_view text, size_t target, std::vector<std::string_view>* out) {
  size_t start = 0;
  while (text.size() - start > target) {
    const size_t cut = next_safe_cut(text, start + target);
    out->push_back(text.substr(start, cut - start));
    start = cut;
  }
  if (start < text.size()) out->push_back(text.substr(start));
}

// word -> occurrences over all texts, pre-tokenized on `threads` threads.
WordCounts count_words(std::span<const std::string_view> texts, const std::vector<std::string>& specials,
                       const PreTokenizer& pre, int threads) {
  size_t total = 0;
  for (std::string_view t : texts) total += t.size();
  const size_t target = std::max(kMinChunkBytes, total / (size_t(threads) * 4 + 1));
  std::vector<std::string_view> chunks;
  for (std::string_view text : texts) {
    for (std::string_view piece : cut_specials(text, specials)) cut_chunks(piece, target, &chunks);
  }
  std::vector<WordCounts> partial(static_cast<size_t>(threads));
  ThreadPool pool(threads);
  pool.run([&](int thread_idx, int num_threads) {
    std::vector<std::string_view> pieces;
    for (size_t c = size_t(thread_idx); c < chunks.size(); c += size_t(num_threads)) {
      pieces.clear();
      pre.split(chunks[c], &pieces);
      for (std::string_view p : pieces) ++partial[size_t(thread_idx)][p];
    }
  });
  WordCounts counts = std::move(partial[0]);
  for (size_t t = 1; t < partial.size(); ++t) {
    for (const auto& [word, n] : partial[t]) counts[word] += n;
  }
  return counts;
}

struct HeapEntry {
  int64_t count;
  PairKey pair;
  // The top of the heap is the most frequent pair, then the smallest (left, right).
  bool operator<(const HeapEntry& o) const { return count != o.count ? count < o.count : pair > o.pair; }
};

// The merge state: distinct words as token-id sequences, pair counts and, per pair, the
// words that held it when it was counted (some may not any more).
class Merger {
 public:
  explicit Merger(const WordCounts& counts) {
    std::vector<std::pair<std::string_view, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [word, n] : sorted) {
      std::vector<int32_t> ids(word.size());
      std::transform(word.begin(), word.end(), ids.begin(), [](char c) { return int32_t(uint8_t(c)); });
      words_.push_back(std::move(ids));
      word_counts_.push_back(n);
    }
    for (size_t w = 0; w < words_.size(); ++w) {
      const std::vector<int32_t>& ids = words_[w];
      for (size_t i = 0; i + 1 < ids.size(); ++i) add(pair_key(ids[i], ids[i + 1]), word_counts_[w], int32_t(w));
    }
    for (const auto& [pair, n] : pair_counts_) heap_.push({n, pair});
  }

  // The most frequent pair, or nullopt when none occurs min_frequency times.
  std::optional<PairKey> best(int64_t min_frequency) {
    while (!heap_.empty()) {
      HeapEntry top = heap_.top();
      heap_.pop();
      auto it = pair_counts_.find(top.pair);
      const int64_t count = it == pair_counts_.end() ? 0 : it->second;
      if (count == top.count) return count >= min_frequency ? std::optional(top.pair) : std::nullopt;
      if (count > 0) heap_.push({count, top.pair});  // counts only fall: re-queue at its true count
    }
    return std::nullopt;
  }

  // Replaces every occurrence of `pair` (left to right, not overlapping) by `merged`.
  void merge(PairKey pair, int32_t merged) {
    const int32_t a = pair_left(pair), b = pair_right(pair);
    std::vector<int32_t> where = std::move(where_[pair]);
    where_.erase(pair);
    pair_counts_.erase(pair);
    std::sort(where.begin(), where.end());
    where.erase(std::unique(where.begin(), where.end()), where.end());
    std::vector<PairKey> created;
    std::vector<int32_t> out;
    for (int32_t w : where) {
      const std::vector<int32_t>& ids = words_[size_t(w)];
      const int64_t n = word_counts_[size_t(w)];
      out.clear();
      for (size_t i = 0; i < ids.size();) {
        if (i + 1 < ids.size() && ids[i] == a && ids[i + 1] == b) {
          if (!out.empty()) {
            add(pair_key(out.back(), a), -n, w);
            created.push_back(add(pair_key(out.back(), merged), n, w));
          }
          if (i + 2 < ids.size()) {
            add(pair_key(b, ids[i + 2]), -n, w);
            created.push_back(add(pair_key(merged, ids[i + 2]), n, w));
          }
          out.push_back(merged);
          i += 2;
        } else {
          out.push_back(ids[i]);
          i += 1;
        }
      }
      words_[size_t(w)].swap(out);
    }
    std::sort(created.begin(), created.end());
    created.erase(std::unique(created.begin(), created.end()), created.end());
    for (PairKey p : created) {
      auto it = pair_counts_.find(p);
      if (it != pair_counts_.end() && it->second > 0) heap_.push({it->second, p});
    }
  }

 private:
  PairKey add(PairKey pair, int64_t delta, int32_t word) {
    int64_t& count = pair_counts_[pair];
    count += delta;
    if (delta > 0) where_[pair].push_back(word);
    return pair;
  }

  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> word_counts_;
  std::unordered_map<PairKey, int64_t> pair_counts_;
  std::unordered_map<PairKey, std::vector<int32_t>> where_;
  std::priority_queue<HeapEntry> heap_;
};

Status check_options(const BpeTrainOptions& o, const std::vector<std::string>& specials) {
  const int minimum = kByteTokens + int(specials.size());
  if (o.vocab_size < minimum) {
    return Status::invalid_argument("vocab size " + std::to_string(o.vocab_size) + " leaves no room for merges: the " +
                                    std::to_string(kByteTokens) + " byte tokens and " +
                                    std::to_string(specials.size()) + " special tokens need " +
                                    std::to_string(minimum) + "; use a larger vocab size");
  }
  if (o.min_frequency < 1) {
    return Status::invalid_argument("min frequency " + std::to_string(o.min_frequency) + " must be at least 1");
  }
  if (o.threads < 1) return Status::invalid_argument("threads must be at least 1");
  for (size_t i = 0; i < specials.size(); ++i) {
    if (specials[i].empty()) return Status::invalid_argument("a special token is empty");
    if (std::find(specials.begin(), specials.begin() + long(i), specials[i]) != specials.begin() + long(i)) {
      return Status::invalid_argument("special token '" + specials[i] + "' is given twice");
    }
    for (int b = 0; b < kByteTokens; ++b) {
      if (specials[i] == byte_to_unicode(uint8_t(b))) {
        return Status::invalid_argument("special token '" + specials[i] + "' is the text of a byte token; "
                                        "choose a longer one");
      }
    }
  }
  return ok_status();
}

}  // namespace

Result<TokenizerSpec> train_bpe(std::span<const std::string_view> texts, const BpeTrainOptions& options) {
  std::vector<std::string> specials;
  if (!options.bos.empty()) specials.push_back(options.bos);
  if (!options.eos.empty()) specials.push_back(options.eos);
  specials.insert(specials.end(), options.specials.begin(), options.specials.end());
  KOI_RETURN_IF_ERROR(check_options(options, specials));
  KOI_ASSIGN_OR_RETURN(PreTokenizer pre, PreTokenizer::create(*pre_tokenizer_regexes(kPre)));

  TokenizerSpec spec;
  spec.kind = TokenizerKind::kBpeMerges;
  spec.byte_level = true;
  spec.pre = std::string(kPre);
  spec.add_space_prefix = false;
  for (int b = 0; b < kByteTokens; ++b) spec.tokens.emplace_back(byte_to_unicode(uint8_t(b)));

  const WordCounts counts = count_words(texts, specials, pre, options.threads);
  Merger merger(counts);
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t id = 0; id < kByteTokens; ++id) id_of.emplace(spec.tokens[size_t(id)], id);
  const int target = options.vocab_size - int(specials.size());
  const int wanted = target - kByteTokens;
  while (int(spec.tokens.size()) < target) {
    std::optional<PairKey> pair = merger.best(options.min_frequency);
    if (!pair) break;
    const std::string& left = spec.tokens[size_t(pair_left(*pair))];
    const std::string& right = spec.tokens[size_t(pair_right(*pair))];
    spec.merges.push_back(left + " " + right);
    // Two merge paths can spell the same text ("a"+"bc", "ab"+"c"): both make one token.
    auto [it, added] = id_of.emplace(left + right, int32_t(spec.tokens.size()));
    if (added) spec.tokens.push_back(it->first);
    merger.merge(*pair, it->second);
    if (options.progress) options.progress(int(spec.tokens.size()) - kByteTokens, wanted);
  }
  spec.types.assign(spec.tokens.size(), TokenType::kNormal);
  for (const std::string& s : specials) {
    const int32_t id = int32_t(spec.tokens.size());
    if (s == options.bos) spec.bos_id = id;
    if (s == options.eos) spec.eos_id = id;
    spec.tokens.push_back(s);
    spec.types.push_back(TokenType::kControl);
  }
  return spec;
}

}  // namespace koi::tokenizer
