#include "cluster/control_plane/control_plane.h"

#include <filesystem>

#include "base/logging.h"
#include "base/metrics.h"
#include "cluster/control_plane/api.h"
#include "cluster/control_plane/config.h"
#include "cluster/control_plane/local_executor.h"
#include "cluster/control_plane/model_api.h"
#include "cluster/control_plane/model_register.h"
#include "cluster/control_plane/pipeline_api.h"
#include "cluster/control_plane/pipeline_controller.h"
#include "cluster/control_plane/reconciler.h"
#include "cluster/control_plane/state_store.h"
#include "net/server.h"

namespace koi::cluster {

struct ControlPlane::Impl {
  ControlPlaneConfig config;
  metrics::Registry registry;
  std::unique_ptr<StateStore> store;
  std::unique_ptr<LocalExecutor> executor;
  std::unique_ptr<Reconciler> reconciler;
  std::unique_ptr<ModelRegistry> models;
  std::unique_ptr<PipelineController> pipelines;
  std::unique_ptr<ApiServer> api;
  std::unique_ptr<net::Server> server;
  int port = 0;
  bool stopped = false;
};

ControlPlane::ControlPlane(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
ControlPlane::~ControlPlane() { stop(); }
int ControlPlane::port() const { return impl_->port; }

Result<std::unique_ptr<ControlPlane>> ControlPlane::start(const ControlPlaneOptions& o) {
  auto impl = std::make_unique<Impl>();
  KOI_ASSIGN_OR_RETURN(impl->config, load_control_plane_config(o.config_path));
  KOI_ASSIGN_OR_RETURN(Policy policy, policy_by_name(impl->config.policy));
  std::error_code ec;
  std::filesystem::create_directories(o.work_dir, ec);
  if (ec) return Status::io_error("--work-dir " + o.work_dir + ": " + ec.message());
  const std::string work_dir = std::filesystem::absolute(o.work_dir).string();
  KOI_ASSIGN_OR_RETURN(impl->store, StateStore::open(o.store_url));
  KOI_RETURN_IF_ERROR(impl->store->sync_config(impl->config));
  impl->executor = std::make_unique<LocalExecutor>(o.koi_binary, impl->config.nodes);
  ReconcilerOptions ro{work_dir, o.koi_binary, policy, impl->config.reconcile_interval_seconds};
  impl->reconciler = std::make_unique<Reconciler>(*impl->store, *impl->executor,
                                                  make_cluster(impl->config.nodes, impl->config.queues),
                                                  impl->registry, ro);
  KOI_RETURN_IF_ERROR(impl->reconciler->recover(wall_seconds()));
  KOI_ASSIGN_OR_RETURN(std::vector<TokenEntry> tokens, impl->store->tokens());
  impl->api = std::make_unique<ApiServer>(*impl->store, *impl->reconciler, *impl->executor, impl->registry,
                                          std::move(tokens), work_dir);
  impl->models = std::make_unique<ModelRegistry>(*impl->store, *impl->executor, work_dir);
  impl->api->add_resource("models", models_resource(*impl->models, *impl->store));
  impl->api->add_resource("modelversions", modelversions_resource(*impl->store));
  impl->pipelines = std::make_unique<PipelineController>(*impl->store, *impl->models, *impl->executor,
                                                         *impl->reconciler, work_dir);
  // The deployment controller connects deploy steps here (PipelineController::set_deploy_step).
  const PipelineContext pipeline_context{work_dir, o.koi_binary, impl->pipelines->deploy_available()};
  impl->api->add_resource("pipelines", pipelines_resource(*impl->store, *impl->reconciler, pipeline_context));
  impl->reconciler->add_controller(impl->pipelines.get());
  net::ServerOptions so;
  so.host = o.host;
  so.port = o.port;
  so.threads = o.threads;
  so.error_content_type = "application/json";
  so.error_body = [](int status, std::string_view message, std::string_view code) {
    return status_json(status, code, message);
  };
  impl->server = std::make_unique<net::Server>(so, impl->api->handler());
  KOI_ASSIGN_OR_RETURN(impl->port, impl->server->listen());
  impl->reconciler->start();
  impl->server->start();
  return std::unique_ptr<ControlPlane>(new ControlPlane(std::move(impl)));
}

void ControlPlane::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->server->stop();
  impl_->reconciler->stop();
  impl_->executor->detach();
}

}  // namespace koi::cluster
