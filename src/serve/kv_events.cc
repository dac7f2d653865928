#include "serve/kv_events.h"

#include <boost/json.hpp>
#include <fmt/format.h>

#include <random>

namespace koi::serve {

namespace json = boost::json;

std::string hash_hex(const engine::BlockHash& hash) { return fmt::format("{:016x}{:016x}", hash.high, hash.low); }

namespace {
// Below 2^53, so that JSON readers that hold numbers as doubles read it exactly.
uint64_t random_epoch() {
  std::random_device rd;
  const uint64_t r = (static_cast<uint64_t>(rd()) << 32) | rd();
  return (r & ((uint64_t{1} << 53) - 1)) | 1;
}
}  // namespace

KvEventLog::KvEventLog(int block_size, size_t capacity)
    : block_size_(block_size), capacity_(capacity), epoch_(random_epoch()) {}

void KvEventLog::append(const std::vector<engine::KvEvent>& events) {
  if (events.empty()) return;
  std::map<uint64_t, std::function<void()>> woken;
  {
    std::lock_guard lock(mu_);
    add(events);
    woken.swap(waiters_);
  }
  for (auto& [id, wake] : woken) wake();
}

void KvEventLog::add(const std::vector<engine::KvEvent>& events) {
  for (const engine::KvEvent& e : events) {
    recent_.push_back({++last_, e});
    if (e.kind == engine::KvEvent::Kind::kStored) {
      cached_.insert(e.hash);
    } else {
      cached_.erase(e.hash);
    }
  }
  while (recent_.size() > capacity_) recent_.pop_front();
}

std::optional<std::string> KvEventLog::events_json(uint64_t after) const {
  std::lock_guard lock(mu_);
  json::array events;
  uint64_t last = std::min(after, last_);
  const uint64_t oldest = recent_.empty() ? last_ + 1 : recent_.front().seq;
  if (after < last_ && after + 1 < oldest) return std::nullopt;  // events after `after` were dropped
  const size_t skip = after < last_ ? static_cast<size_t>(after + 1 - oldest) : recent_.size();
  for (auto it = recent_.begin() + static_cast<std::ptrdiff_t>(skip); it != recent_.end() && events.size() < kMaxBatch;
       ++it) {
    const bool stored = it->event.kind == engine::KvEvent::Kind::kStored;
    events.push_back(json::object{{"seq", it->seq}, {"type", stored ? "stored" : "removed"}, {"hash", hash_hex(it->event.hash)}});
    last = it->seq;
  }
  return json::serialize(
      json::object{{"epoch", epoch_}, {"block_size", block_size_}, {"last", last}, {"events", std::move(events)}});
}

std::optional<uint64_t> KvEventLog::wake_after(uint64_t after, std::function<void()> wake) {
  std::lock_guard lock(mu_);
  if (after != last_) return std::nullopt;
  waiters_.emplace(++next_waiter_, std::move(wake));
  return next_waiter_;
}

void KvEventLog::forget(uint64_t waiter) {
  std::lock_guard lock(mu_);
  waiters_.erase(waiter);
}

std::string KvEventLog::snapshot_json() const {
  std::lock_guard lock(mu_);
  json::array hashes;
  for (const engine::BlockHash& h : cached_) hashes.push_back(json::string(hash_hex(h)));
  return json::serialize(
      json::object{{"epoch", epoch_}, {"block_size", block_size_}, {"last", last_}, {"hashes", std::move(hashes)}});
}

}  // namespace koi::serve
