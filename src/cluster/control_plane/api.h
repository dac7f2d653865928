// ApiServer: the control plane's REST API on net::Server. JSON everywhere (a Job may also be
// submitted as YAML); errors in Kubernetes' Status shape {kind: Status, code, reason, message}.
//
//   GET    /health, /metrics                         (no token)
//   GET    /apis/v1/whoami
//   POST   /apis/v1/namespaces/{ns}/jobs             submit (JSON or YAML body)
//   GET    /apis/v1/namespaces/{ns}/jobs             list
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}      one job
//   DELETE /apis/v1/namespaces/{ns}/jobs/{name}      cancel (?resourceVersion=N: 409 if stale)
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}/events
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}/logs  ?replica=R&attempt=A&follow=1
//   GET    /apis/v1/jobs                             every namespace (admin)
//   GET    /apis/v1/queues, /apis/v1/nodes
//   PUT    /apis/v1/queues/{name}                    change or add a queue (admin; 403 for tenants)
//   GET    /apis/v1/watch?resourceVersion=N          server-sent events of every change after N
//                                                    (&timeoutSeconds=S ends the stream)
// Auth: "Authorization: Bearer TOKEN"; the token's SHA-256 names a tenant or an admin. A
// tenant sees and changes only its own namespace: another's objects answer 404 exactly as
// missing ones do, so names do not leak. Admins see every namespace, queue and node.
// Handlers run on the server's worker threads; the store serialises their calls.
#pragma once

#include <map>
#include <string>

#include "base/metrics.h"
#include "cluster/control_plane/config.h"
#include "cluster/control_plane/executor.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/state_store.h"
#include "net/server.h"

namespace koi::cluster {

struct Reply {
  int status = 200;
  std::string body;
  std::string content_type = "application/json";
};

class ApiServer {
 public:
  ApiServer(StateStore& store, Reconciler& reconciler, Executor& executor, metrics::Registry& registry,
            std::vector<TokenEntry> tokens, std::string work_dir);

  net::Handler handler();
  // The non-streaming routes as a plain function (tests call it directly).
  Reply route(const net::Request& req);

 private:
  boost::asio::awaitable<void> handle(net::Request& req, net::Responder& res);
  boost::asio::awaitable<void> stream_logs(net::Request& req, net::Responder& res);
  boost::asio::awaitable<void> stream_watch(net::Request& req, net::Responder& res);
  std::optional<Principal> authenticate(const net::Request& req) const;

  StateStore& store_;
  Reconciler& reconciler_;
  Executor& executor_;
  metrics::Registry& registry_;
  std::map<std::string, Principal> tokens_;  // sha256 hex -> principal
  std::vector<std::string> tenants_;
  const std::string work_dir_;
};

// Kubernetes-style error body.
std::string status_json(int code, std::string_view reason, std::string_view message);
int http_status_of(const Status& s);

}  // namespace koi::cluster
