// Proxy: one OpenAI request through the gateway, in the steps a reader can follow:
//   1. authenticate the Bearer key (401),
//   2. parse the body and admit it against the tenant's limits (400, 403, 404, 429),
//   3. open an exchange with a replica: an attempt that fails before the replica's first byte
//      (refused, reset, timed out, a 5xx status) is retried on another replica, up to
//      max_attempts (502/503/504 when none answers),
//   4. relay the answer: a whole body, or each server-sent event the moment it is complete,
//   5. record it in the ledger and meter it.
// Every request ends with exactly one usage record. The end a client takes as success — the
// body of a plain response, "data: [DONE]" of a stream — is sent only after its record is
// committed. A stream the replica cuts after the first byte ends with an OpenAI-style error
// event and no [DONE] (OpenAI clients raise it), recorded as 502 with the tokens the client
// received; streams ask replicas for usage in every chunk (stream_options.continuous_usage_stats,
// stripped again unless the client asked for it) so that a cut stream is still metered
// exactly. A client that goes away closes the replica connection at once (the replica stops
// generating) and is recorded as 499 with what the replica produced until then.
// Thread-safe: one Proxy serves every connection; per-request state lives in the coroutine.
#pragma once

#include <boost/asio/awaitable.hpp>

#include "base/clock.h"
#include "base/metrics.h"
#include "engine/block_hash.h"
#include "gateway/config.h"
#include "gateway/fleet.h"
#include "gateway/usage_store.h"
#include "net/client.h"
#include "net/server.h"

namespace koi::gateway {

class Proxy {
 public:
  Proxy(const GatewayConfig& config, Fleet& fleet, Ledger& ledger, metrics::Registry& metrics, net::Client& client, const Clock& clock);
  boost::asio::awaitable<void> handle(net::Request& req, net::Responder& res, bool chat);

 private:
  struct Call;
  boost::asio::awaitable<void> reject(Call& call, net::Responder& res, int status, std::string message, std::string type,
                                      int64_t retry_after_s);
  boost::asio::awaitable<std::vector<engine::BlockHash>> prompt_block_hashes_of(const Call& call);
  boost::asio::awaitable<std::unique_ptr<net::Exchange>> open_upstream(Call& call, const net::Request& req,
                                                                   net::Responder& res);
  boost::asio::awaitable<void> relay_whole(Call& call, net::Exchange& up, net::Responder& res);
  boost::asio::awaitable<void> relay_stream(Call& call, net::Exchange& up, net::Responder& res);
  boost::asio::awaitable<Status> commit(Call& call);
  void finish(Call& call);
  void record_metrics(const UsageRecord& r);

  const GatewayConfig& config_;
  Fleet& fleet_;
  Ledger& ledger_;
  metrics::Registry& metrics_;
  net::Client& client_;
  const Clock& clock_;
};

}  // namespace koi::gateway
