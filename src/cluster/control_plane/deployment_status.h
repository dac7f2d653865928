// DeploymentStatus: the typed form of a Deployment's `status` (deployment.h lists the
// fields), which only the DeploymentController writes, and its JSON. Plain data; reading
// tolerates absent fields (a status the API has just created holds only a phase).
#pragma once

#include <boost/json/object.hpp>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "cluster/control_plane/object.h"

namespace koi::cluster {

// One koi serve replica: its job, the version it serves, where, and how far along it is.
struct ServeReplica {
  std::string job;
  int version = 0;
  int port = 0;
  bool ready = false, registered = false, draining = false, cancelled = false;
  double drain_since = 0;
  std::string waiting;  // why its job waits (plan()'s words), "" when running
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port); }
};

struct RolloutState {
  int from = 0, to = 0;
  std::string to_artifact;
  std::vector<int> steps;
  int step = 0, weight = 0;
  double weight_since = 0, started = 0;
  std::string cause;            // AliasMoved (ALIAS) | SpecChanged | RollbackRequested
  std::string reason, message;  // the last decision's wait, or why it must roll back
};

struct DeploymentStatus {
  std::string phase = "Progressing", reason, message;
  int version = 0, previous = 0;  // the live version and the one before it
  std::string artifact, previous_artifact;
  std::optional<RolloutState> rollout;
  std::vector<int> rolled_back;  // versions rolled back from: not rolled out again by themselves
  boost::json::object last_rollback;
  std::vector<ServeReplica> replicas;
  int desired = 0;
  double down_since = 0;
  int down_max = 0;
  std::string scale_reason, scale_message;
  std::map<int, double> weights;  // version -> what the gateway was told
  bool rollback_requested = false;
  int next_replica = 1;
  std::vector<Condition> conditions;

  bool was_rolled_back(int v) const;
};

DeploymentStatus deployment_status_from_json(const boost::json::object& status);
// With `versions` added: replicas, ready and weight per version (what `koi deploy status` shows).
boost::json::object deployment_status_json(const DeploymentStatus& status);
// "v3"
std::string version_name(int version);

}  // namespace koi::cluster
