// KvSubscriber: keeps the Fleet's KvIndex (gateway/kv_index.h) in step with the KV events of
// every replica of a model routed by kv_events. Every `interval` it reads, for each such
// replica, GET /kv/events?after=N (N: the last event the index applied; again at once while
// a full batch came back) with net::Client. The replica's snapshot (GET /kv/snapshot) replaces
// what the index held when the replica is new, when events were lost (a gap in the numbers,
// or 410 because the replica no longer keeps them) and when the replica restarted (a new
// epoch). A replica that does not answer, or answers something else, is dropped from the index
// (it holds nothing for routing) until it answers again.
// Runs as one coroutine on the gateway's API io_context; the index has its own lock.
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
  KvSubscriber(Fleet& fleet, net::Client& client, std::chrono::milliseconds interval, std::chrono::milliseconds timeout);

  // Polls until its io_context stops.
  boost::asio::awaitable<void> run();
  // Brings one replica's entry up to date (exposed for tests).
  boost::asio::awaitable<void> poll(const Fleet::Endpoint& replica);

 private:
  boost::asio::awaitable<void> resync(const Fleet::Endpoint& replica);
  boost::asio::awaitable<Result<KvFeed>> fetch(const Fleet::Endpoint& replica, std::string target, bool* gone);
  void drop(const Fleet::Endpoint& replica, const std::string& why);

  Fleet& fleet_;
  net::Client& client_;
  std::chrono::milliseconds interval_;
  net::Timeouts timeouts_;
  std::set<std::string> failing_;  // replicas whose last poll failed (logged once); run()'s coroutine only
};

}  // namespace koi::gateway
