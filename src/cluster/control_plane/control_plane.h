// ControlPlane: `koi cluster serve` as an object. start() opens the store (migrating its
// schema), loads the config, writes the declared queues, nodes and token hashes into the
// store, recovers running work (Reconciler::recover), starts the reconcile loop on its own
// thread and the API on net::Server. stop() stops both and leaves the jobs running: the
// next start adopts them. Thread-safe: start/stop from one thread.
#pragma once

#include <memory>
#include <string>

#include "base/status.h"

namespace koi::cluster {

struct ControlPlaneOptions {
  std::string store_url;    // sqlite:PATH | PATH | postgres://...
  std::string config_path;  // cluster.yaml (config.h)
  std::string work_dir;     // replicas' working directories and logs
  std::string host = "127.0.0.1";
  int port = 0;
  int threads = 4;
  std::string koi_binary;   // this binary: the replica wrapper and koi train
};

class ControlPlane {
 public:
  static Result<std::unique_ptr<ControlPlane>> start(const ControlPlaneOptions& options);
  ~ControlPlane();
  int port() const;
  void stop();

 private:
  struct Impl;
  explicit ControlPlane(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace koi::cluster
