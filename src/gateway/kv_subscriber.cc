#include "gateway/kv_subscriber.h"

#include <boost/asio.hpp>

#include "base/logging.h"

namespace koi::gateway {

namespace asio = boost::asio;

namespace {
constexpr size_t kServerMaxBatch = 4096;  // serve::KvEventLog::kMaxBatch: a full batch means more are waiting
constexpr size_t kMaxFeedBytes = 64 << 20;
}  // namespace

KvSubscriber::KvSubscriber(Fleet& fleet, net::Client& client, std::chrono::milliseconds interval,
                           std::chrono::milliseconds wait, std::chrono::milliseconds timeout)
    : fleet_(fleet), client_(client), interval_(interval), wait_(wait) {
  timeouts_.connect = timeouts_.idle = timeout;
  timeouts_.first_byte = timeout + wait;  // a long poll's answer comes after up to `wait`
}

asio::awaitable<void> KvSubscriber::run() {
  const auto executor = co_await asio::this_coro::executor;
  asio::steady_timer timer(executor);
  for (;;) {
    for (const Fleet::Endpoint& e : fleet_.kv_event_endpoints()) {
      if (following_.insert(e.url).second) asio::co_spawn(executor, follow(e), asio::detached);
    }
    timer.expires_after(interval_);
    auto [ec] = co_await timer.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) co_return;
  }
}

bool KvSubscriber::listed(const std::string& url) const {
  for (const Fleet::Endpoint& e : fleet_.kv_event_endpoints()) {
    if (e.url == url) return true;
  }
  return false;
}

asio::awaitable<void> KvSubscriber::follow(Fleet::Endpoint replica) {
  asio::steady_timer pause(co_await asio::this_coro::executor);
  while (listed(replica.url)) {
    // After an answer to a long poll, ask again at once: the replica holds the next request.
    if (co_await poll(replica) && wait_.count() > 0) continue;
    pause.expires_after(interval_);
    auto [ec] = co_await pause.async_wait(asio::as_tuple(asio::use_awaitable));
    if (ec) break;
  }
  following_.erase(replica.url);
}

void KvSubscriber::drop(const Fleet::Endpoint& replica, const std::string& why) {
  fleet_.kv_index().forget(replica.url);
  if (failing_.insert(replica.url).second) log::warn("kv events of {}: {}; it counts as holding no blocks", replica.url, why);
}

asio::awaitable<Result<KvFeed>> KvSubscriber::fetch(const Fleet::Endpoint& replica, std::string target, bool* gone) {
  net::ClientRequest req;
  req.target = target;
  auto r = co_await client_.call(replica.host, replica.port, std::move(req), timeouts_);
  if (!r.ok()) co_return r.status();
  *gone = r->status == 410;
  if (r->status != 200) {
    std::string why = "GET " + target + " answered " + std::to_string(r->status);
    if (r->status == 404) why += " (start the replica with koi serve --kv-events)";
    co_return Status::unavailable(why);
  }
  if (r->body.size() > kMaxFeedBytes) co_return Status::invalid_argument("the answer is larger than 64 MiB");
  co_return parse_kv_feed(r->body);
}

asio::awaitable<void> KvSubscriber::resync(const Fleet::Endpoint& replica) {
  bool gone = false;
  Result<KvFeed> snap = co_await fetch(replica, "/kv/snapshot", &gone);
  if (!snap.ok()) {
    drop(replica, snap.status().message());
    co_return;
  }
  fleet_.kv_index().reset(replica.url, *snap);
  if (failing_.erase(replica.url)) log::info("kv events of {}: synced again at event {}", replica.url, snap->last);
}

asio::awaitable<bool> KvSubscriber::poll(const Fleet::Endpoint& replica) {
  KvIndex& index = fleet_.kv_index();
  for (;;) {
    const std::optional<KvIndex::Sync> sync = index.sync_of(replica.url);
    if (!sync) {
      co_await resync(replica);
      co_return index.sync_of(replica.url).has_value();
    }
    bool gone = false;
    const std::string target =
        "/kv/events?after=" + std::to_string(sync->last) + "&wait_ms=" + std::to_string(wait_.count());
    Result<KvFeed> feed = co_await fetch(replica, target, &gone);
    if (gone) {
      log::info("kv events of {}: events after {} are gone; resynchronising", replica.url, sync->last);
      co_await resync(replica);
      co_return index.sync_of(replica.url).has_value();
    }
    if (!feed.ok()) {
      drop(replica, feed.status().message());
      co_return false;
    }
    if (!index.apply(replica.url, *feed)) {
      log::info("kv events of {}: the sequence broke (epoch or numbers); resynchronising", replica.url);
      co_await resync(replica);
      co_return index.sync_of(replica.url).has_value();
    }
    if (feed->events.size() < kServerMaxBatch) co_return true;
  }
}

}  // namespace koi::gateway
