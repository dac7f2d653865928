// KvSubscriber: keeps the Fleet's KvIndex (gateway/kv_index.h) in step with the KV events of
// every replica of a model routed by kv_events. It follows each such replica in a coroutine of
// its own: GET /kv/events?after=N&wait_ms=W (N: the last event the index applied), a long poll
// the replica holds until it has an event after N or W ms passed, then at once the next one;
// with W = 0, a plain read every `interval`. Every `interval` it also looks for replicas to
// follow (a follower ends when its replica leaves the fleet). The replica's snapshot
// (GET /kv/snapshot) replaces what the index held when the replica is new, when events were
// lost (a gap in the numbers, or 410 because the replica no longer keeps them) and when the
// replica restarted (a new epoch). A replica that does not answer, or answers something else,
// is dropped from the index (it holds nothing for routing) and asked again after `interval`.
// Runs on the gateway's API io_context (one thread): the followers share `following_`; the
// index has its own lock.
#pragma once

#include <boost/asio/awaitable.hpp>
#include <chrono>
#include <set>
#include <string>

#include "gateway/fleet.h"
#include "net/client.h"

namespace koi::gateway {

class KvSubscriber {
 public:
  // timeout: connecting and (beyond `wait`) the first byte of an answer.
  KvSubscriber(Fleet& fleet, net::Client& client, std::chrono::milliseconds interval, std::chrono::milliseconds wait,
               std::chrono::milliseconds timeout);

  // Follows the replicas until its io_context stops.
  boost::asio::awaitable<void> run();
  // Brings one replica's entry up to date, waiting up to `wait` for its next event; false when
  // the replica failed to answer (exposed for tests).
  boost::asio::awaitable<bool> poll(const Fleet::Endpoint& replica);

 private:
  boost::asio::awaitable<void> follow(Fleet::Endpoint replica);
  bool listed(const std::string& url) const;
  boost::asio::awaitable<void> resync(const Fleet::Endpoint& replica);
  boost::asio::awaitable<Result<KvFeed>> fetch(const Fleet::Endpoint& replica, std::string target, bool* gone);
  void drop(const Fleet::Endpoint& replica, const std::string& why);

  Fleet& fleet_;
  net::Client& client_;
  std::chrono::milliseconds interval_;
  std::chrono::milliseconds wait_;
  net::Timeouts timeouts_;
  std::set<std::string> failing_;    // replicas whose last poll failed (logged once)
  std::set<std::string> following_;  // replicas with a follower coroutine
};

}  // namespace koi::gateway
