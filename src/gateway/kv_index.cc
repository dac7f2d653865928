#include "gateway/kv_index.h"

#include <algorithm>
#include <boost/json.hpp>
#include <charconv>
#include <fmt/format.h>

namespace koi::gateway {

namespace json = boost::json;

Result<engine::BlockHash> parse_block_hash(std::string_view hex) {
  auto half = [](std::string_view s, uint64_t* out) {
    auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out, 16);
    return ec == std::errc() && ptr == s.data() + s.size();
  };
  engine::BlockHash h;
  if (hex.size() != 32 || !half(hex.substr(0, 16), &h.high) || !half(hex.substr(16), &h.low)) {
    return Status::invalid_argument("a block hash must be 32 hex digits, got '" + std::string(hex) + "'");
  }
  return h;
}

namespace {

Result<uint64_t> number_field(const json::object& o, const char* key, std::string_view where) {
  const json::value* v = o.if_contains(key);
  if (v && v->is_uint64()) return v->as_uint64();
  if (v && v->is_int64() && v->as_int64() >= 0) return static_cast<uint64_t>(v->as_int64());
  return Status::invalid_argument(fmt::format("{}: '{}' must be a number >= 0", where, key));
}

Result<KvEventRecord> parse_event(const json::value& v, size_t i) {
  const std::string where = fmt::format("events[{}]", i);
  if (!v.is_object()) return Status::invalid_argument(where + " must be an object");
  const json::object& o = v.as_object();
  KvEventRecord e;
  KOI_ASSIGN_OR_RETURN(e.seq, number_field(o, "seq", where));
  const json::value* type = o.if_contains("type");
  if (!type || !type->is_string() || (type->as_string() != "stored" && type->as_string() != "removed")) {
    return Status::invalid_argument(where + ": 'type' must be \"stored\" or \"removed\"");
  }
  e.stored = type->as_string() == "stored";
  const json::value* hash = o.if_contains("hash");
  if (!hash || !hash->is_string()) return Status::invalid_argument(where + ": 'hash' must be a string");
  KOI_ASSIGN_OR_RETURN(e.hash, parse_block_hash(hash->as_string()));
  return e;
}

}  // namespace

Result<KvFeed> parse_kv_feed(std::string_view text) {
  json::error_code ec;
  const json::value v = json::parse(text, ec);
  if (ec || !v.is_object()) return Status::invalid_argument("a KV event answer must be a JSON object");
  const json::object& o = v.as_object();
  KvFeed feed;
  KOI_ASSIGN_OR_RETURN(feed.epoch, number_field(o, "epoch", "kv feed"));
  KOI_ASSIGN_OR_RETURN(feed.last, number_field(o, "last", "kv feed"));
  KOI_ASSIGN_OR_RETURN(const uint64_t block_size, number_field(o, "block_size", "kv feed"));
  if (block_size == 0 || block_size > 1 << 20) return Status::invalid_argument("kv feed: 'block_size' must be 1 or more");
  feed.block_size = static_cast<int>(block_size);
  if (const json::value* events = o.if_contains("events")) {
    if (!events->is_array()) return Status::invalid_argument("kv feed: 'events' must be a list");
    for (size_t i = 0; i < events->as_array().size(); ++i) {
      KOI_ASSIGN_OR_RETURN(KvEventRecord e, parse_event(events->as_array()[i], i));
      feed.events.push_back(e);
    }
  }
  if (const json::value* hashes = o.if_contains("hashes")) {
    if (!hashes->is_array()) return Status::invalid_argument("kv feed: 'hashes' must be a list");
    for (const json::value& h : hashes->as_array()) {
      if (!h.is_string()) return Status::invalid_argument("kv feed: 'hashes' must be a list of strings");
      KOI_ASSIGN_OR_RETURN(engine::BlockHash hash, parse_block_hash(h.as_string()));
      feed.hashes.push_back(hash);
    }
  }
  return feed;
}

std::vector<engine::BlockHash> prompt_block_hashes(std::span<const int32_t> tokens, int block_size, uint64_t cache_key) {
  std::vector<engine::BlockHash> out;
  if (block_size <= 0) return out;
  const size_t bs = static_cast<size_t>(block_size);
  engine::BlockHash parent;
  for (size_t start = 0; start + bs < tokens.size(); start += bs) {
    parent = engine::hash_block(parent, tokens.subspan(start, bs), cache_key);
    out.push_back(parent);
  }
  return out;
}

KvIndex::ReplicaId KvIndex::id_of(const std::string& replica) {
  auto [it, added] = ids_.emplace(replica, static_cast<ReplicaId>(names_.size()));
  if (added) {
    names_.push_back(replica);
    replicas_.emplace_back();
  }
  return it->second;
}

void KvIndex::store(ReplicaId id, const engine::BlockHash& hash) {
  std::vector<ReplicaId>& h = holders_[hash];
  if (std::find(h.begin(), h.end(), id) != h.end()) return;
  h.push_back(id);
  ++replicas_[id].num_blocks;
}

void KvIndex::remove(ReplicaId id, const engine::BlockHash& hash) {
  auto it = holders_.find(hash);
  if (it == holders_.end()) return;
  auto pos = std::find(it->second.begin(), it->second.end(), id);
  if (pos == it->second.end()) return;
  it->second.erase(pos);
  --replicas_[id].num_blocks;
  if (it->second.empty()) holders_.erase(it);
}

void KvIndex::clear(ReplicaId id) {
  if (replicas_[id].num_blocks > 0) {
    for (auto it = holders_.begin(); it != holders_.end();) {
      std::erase(it->second, id);
      it = it->second.empty() ? holders_.erase(it) : std::next(it);
    }
  }
  replicas_[id] = ReplicaState{};
}

bool KvIndex::apply(const std::string& replica, const KvFeed& feed) {
  std::lock_guard lock(mu_);
  auto it = ids_.find(replica);
  if (it == ids_.end()) return false;
  ReplicaState& r = replicas_[it->second];
  if (!r.synced || r.sync.epoch != feed.epoch || r.sync.block_size != feed.block_size) return false;
  // A restarted server with the same epoch cannot happen (random); one whose numbers are
  // behind ours, or a batch that skips a number, means events were lost.
  if (feed.last < r.sync.last) return false;
  uint64_t expect = r.sync.last + 1;
  for (const KvEventRecord& e : feed.events) {
    if (e.seq != expect++) return false;
  }
  for (const KvEventRecord& e : feed.events) {
    if (e.stored) {
      store(it->second, e.hash);
    } else {
      remove(it->second, e.hash);
    }
  }
  r.sync.last = feed.events.empty() ? r.sync.last : feed.events.back().seq;
  return true;
}

void KvIndex::reset(const std::string& replica, const KvFeed& feed) {
  std::lock_guard lock(mu_);
  const ReplicaId id = id_of(replica);
  clear(id);
  for (const engine::BlockHash& h : feed.hashes) store(id, h);
  replicas_[id].synced = true;
  replicas_[id].sync = Sync{feed.epoch, feed.last, feed.block_size};
}

void KvIndex::forget(const std::string& replica) {
  std::lock_guard lock(mu_);
  if (auto it = ids_.find(replica); it != ids_.end()) clear(it->second);
}

std::optional<KvIndex::Sync> KvIndex::sync_of(const std::string& replica) const {
  std::lock_guard lock(mu_);
  auto it = ids_.find(replica);
  if (it == ids_.end() || !replicas_[it->second].synced) return std::nullopt;
  return replicas_[it->second].sync;
}

size_t KvIndex::match(std::string_view replica, std::span<const engine::BlockHash> blocks) const {
  std::lock_guard lock(mu_);
  auto it = ids_.find(std::string(replica));
  if (it == ids_.end() || !replicas_[it->second].synced) return 0;
  size_t n = 0;
  for (const engine::BlockHash& b : blocks) {
    auto h = holders_.find(b);
    if (h == holders_.end() || std::find(h->second.begin(), h->second.end(), it->second) == h->second.end()) break;
    ++n;
  }
  return n;
}

std::vector<std::string> KvIndex::holders(const engine::BlockHash& hash) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  if (auto it = holders_.find(hash); it != holders_.end()) {
    for (ReplicaId id : it->second) out.push_back(names_[id]);
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::string> KvIndex::hashes_of(const std::string& replica) const {
  std::lock_guard lock(mu_);
  std::vector<std::string> out;
  auto it = ids_.find(replica);
  if (it == ids_.end()) return out;
  for (const auto& [hash, ids] : holders_) {
    if (std::find(ids.begin(), ids.end(), it->second) != ids.end()) {
      out.push_back(fmt::format("{:016x}{:016x}", hash.high, hash.low));
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

size_t KvIndex::num_blocks() const {
  std::lock_guard lock(mu_);
  return holders_.size();
}

}  // namespace koi::gateway
