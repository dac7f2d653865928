// GatewayAdmin: the control plane's side of `koi gateway`'s admin API (docs/gateway.md), as
// the DeploymentController uses it: register and deregister a replica under a route and
// version, set the versions' weights, read the per-version statistics. Blocking calls on
// net::Client::fetch (the reconciler's thread); errors carry the gateway's message. Adding a
// replica that is already there and removing one that is gone succeed, so a controller that
// repeats a step after a restart or a lost write converges. Thread-compatible.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "base/status.h"
#include "cluster/control_plane/config.h"

namespace koi::cluster {

struct GatewayVersionStats {
  int64_t requests = 0, errors = 0;
};

class GatewayAdmin {
 public:
  explicit GatewayAdmin(GatewayLink link) : link_(std::move(link)) {}
  bool configured() const { return !link_.admin_url.empty(); }

  Status add_replica(const std::string& route, const std::string& version, const std::string& url);
  Status remove_replica(const std::string& route, const std::string& version, const std::string& url);
  Status set_weights(const std::string& route, const std::map<std::string, double>& weights);
  // version -> statistics of `route` (empty when the gateway has no such route yet).
  Result<std::map<std::string, GatewayVersionStats>> stats(const std::string& route);

 private:
  Result<std::string> call(const std::string& method, const std::string& path, const std::string& body);
  GatewayLink link_;
};

}  // namespace koi::cluster
