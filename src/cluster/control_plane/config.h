// The control plane's configuration (`koi cluster serve --config cluster.yaml`): the declared
// inventory, the queues, the tenants with their tokens, and the scheduling policy.
//
//   policy: koi                        # cluster::policy_by_name; default koi
//   reconcileIntervalSeconds: 0.2      # the reconcile loop's period
//   executor:                          # optional; default {type: local}
//     type: local                      # local (child processes here) | slurm
//     partition: gpu                   # slurm: the partition whose nodes Koi schedules;
//                                      #   default: every node Slurm reports
//     mpi: pmix                        # slurm: srun --mpi of train/finetune gangs; default pmix
//     commandTimeoutSeconds: 10        # slurm: the limit of one sinfo/squeue/sbatch call
//   nodes:                             # the local executor's inventory; with slurm, none:
//                                      #   Slurm's nodes are the inventory
//     - {name: n0, cpu: 16, memoryMiB: 65536, gpus: {type: H100, count: 4, memoryMiB: 81920}}
//   queues:
//     - name: team-a
//       tenant: alpha                  # the namespace whose jobs it takes
//       cohort: shared                 # optional; queues of a cohort lend and borrow
//       priority: 0
//       quota: {gpu: {nominal: 2, borrowingLimit: 2, lendingLimit: 2}, cpu: {nominal: 8}, memory: {nominal: 32768}}
//   tenants:
//     - {name: alpha, token: secret-a}          # or tokenSha256: <hex>
//   admins:
//     - {name: ops, token: secret-admin}
//   gateway:                           # optional; Deployments need it
//     adminUrl: http://127.0.0.1:8081  # the koi gateway's admin API (its admin.listen)
//     adminKey: change-me-please-0123  # its admin.key
//
// The config is the declared state, applied at every start (as `kubectl apply` of a
// manifest): an admin may change or add a queue at run time (PUT /apis/v1/queues/NAME); the
// change is stored and in force until the next start applies the config again.
// Tokens are kept only as SHA-256 hashes (in memory and in the store). Unknown keys and bad
// values are errors naming their path ("queues[1].quota.gpu.nominal: must be >= 0").
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/scheduler.h"
#include "cluster/types.h"

namespace koi::cluster {

struct Principal {
  std::string name;    // tenant (= namespace) or admin name
  bool admin = false;
};

struct TokenEntry {
  std::string sha256_hex;
  Principal principal;
};

struct ExecutorConfig {
  std::string type = "local";  // local | slurm
  std::string partition;       // slurm only
  std::string mpi = "pmix";    // slurm only
  double command_timeout_seconds = 10;
};

// The koi gateway whose routes Deployments manage (through its admin API).
struct GatewayLink {
  std::string admin_url;  // "" = none: deployments are refused
  std::string admin_key;
};

struct ControlPlaneConfig {
  std::string policy = "koi";
  ExecutorConfig executor;
  double reconcile_interval_seconds = 0.2;
  std::vector<NodeSpec> nodes;
  std::vector<QueueSpec> queues;
  std::vector<TokenEntry> tokens;
  std::vector<std::string> tenants;
  GatewayLink gateway;
};

Result<ControlPlaneConfig> parse_control_plane_config(const std::string& text, const std::string& origin);
Result<ControlPlaneConfig> load_control_plane_config(const std::string& path);

// A Queue object (PUT /apis/v1/queues/NAME): apiVersion koi/v1, kind Queue, metadata.name,
// spec {tenant, cohort, priority, quota} as in the config; errors name the field.
Result<QueueSpec> parse_queue_manifest(const std::string& text, const std::string& name,
                                       const std::vector<std::string>& tenants);

// Lower-case hex SHA-256 of a token (OpenSSL).
std::string sha256_hex(std::string_view text);

}  // namespace koi::cluster
