// ApiServer: the control plane's REST API on net::Server. JSON everywhere (a Job may also be
// submitted as YAML); errors in Kubernetes' Status shape {kind: Status, code, reason, message}.
//
//   GET    /health, /metrics                         (no token)
//   GET    /, /console/...                           the web console's static files (no token;
//                                                    the page asks for one: console.h)
//   GET    /apis/v1/whoami
//   POST   /apis/v1/namespaces/{ns}/jobs             submit (JSON or YAML body)
//   GET    /apis/v1/namespaces/{ns}/jobs             list
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}      one job
//   DELETE /apis/v1/namespaces/{ns}/jobs/{name}      cancel (?resourceVersion=N: 409 if stale)
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}/events
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}/logs  ?replica=R&attempt=A&follow=1
//   GET    /apis/v1/namespaces/{ns}/jobs/{name}/metrics  ?maxPoints=N (default 1000): {latest,
//                                                    series: {loss: [[step, value]...], ...}}
//                                                    (job_metrics.h; a trainer's series so far)
//   GET    /apis/v1/jobs                             every namespace (admin)
//   GET    /apis/v1/queues, /apis/v1/nodes
//   PUT    /apis/v1/queues/{name}                    change or add a queue (admin; 403 for tenants)
//   GET    /apis/v1/admission; PUT (admin)           pause or resume admissions (admission.h)
//   GET    /apis/v1/watch?resourceVersion=N          server-sent events of every change after N
//                                                    (&timeoutSeconds=S ends the stream)
//   *      /apis/v1/namespaces/{ns}/{plural}[/...]   a kind registered with add_resource()
//   GET    /apis/v1/{plural}                         the same kind in every namespace (admin)
// Auth: "Authorization: Bearer TOKEN"; the token's SHA-256 names a tenant or an admin. A
// tenant sees and changes only its own namespace: another's objects answer 404 exactly as
// missing ones do, so names do not leak. Admins see every namespace, queue and node.
// Handlers run on the server's worker threads; the store serialises their calls.
#pragma once

#include <boost/beast/http/verb.hpp>
#include <boost/json/value.hpp>
#include <functional>
#include <map>
#include <string>
#include <vector>

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

// A kind beyond jobs (models, deployments, pipelines), routed to the handler its own file
// registers. The token and the namespace are checked before it is called: a tenant reaches
// only its own namespace. `ns` is "" for GET /apis/v1/{plural} (admins only).
struct ResourceRequest {
  Principal who;
  std::string ns;
  std::vector<std::string> path;  // after {plural}: [] the collection, [name], [name, sub]
  boost::beast::http::verb method;
  std::string body;
  std::map<std::string, std::string> query;
};
using ResourceHandler = std::function<Reply(const ResourceRequest&)>;

// Replies every handler shares: the Kubernetes Status body for an error, JSON for a result.
Reply error_reply(const Status& s);
Reply json_reply(const boost::json::value& v, int code = 200);

class ApiServer {
 public:
  ApiServer(StateStore& store, Reconciler& reconciler, Executor& executor, metrics::Registry& registry,
            std::vector<TokenEntry> tokens, std::string work_dir);

  // Routes {plural} to `handler` (before the server starts; not thread-safe).
  void add_resource(const std::string& plural, ResourceHandler handler);

  net::Handler handler();
  // The non-streaming routes as a plain function (tests call it directly).
  Reply route(const net::Request& req);

 private:
  boost::asio::awaitable<void> handle(net::Request& req, net::Responder& res);
  boost::asio::awaitable<void> stream_logs(net::Request& req, net::Responder& res);
  boost::asio::awaitable<void> stream_watch(net::Request& req, net::Responder& res);
  std::optional<Principal> authenticate(const net::Request& req) const;
  Reply route_cluster(const Principal& who, const net::Request& req, const std::vector<std::string>& parts);
  Reply route_jobs(const Principal& who, const net::Request& req, const std::vector<std::string>& parts);
  Reply submit(const Principal& who, const std::string& ns, const std::string& body);
  Reply job_metrics_reply(const JobObject& job, const std::map<std::string, std::string>& q);
  Reply route_resource(const Principal& who, const net::Request& req, const std::vector<std::string>& parts);

  StateStore& store_;
  Reconciler& reconciler_;
  Executor& executor_;
  metrics::Registry& registry_;
  std::map<std::string, Principal> tokens_;  // sha256 hex -> principal
  std::vector<std::string> tenants_;
  const std::string work_dir_;
  std::map<std::string, ResourceHandler> resources_;  // plural -> handler
};

// Kubernetes-style error body.
std::string status_json(int code, std::string_view reason, std::string_view message);
int http_status_of(const Status& s);

}  // namespace koi::cluster
