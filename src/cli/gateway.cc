// koi gateway: the front door of a fleet of OpenAI-compatible engines (see src/gateway).
//   koi gateway --config gateway.yaml [--port N] [--admin-port N] [--store URL] [--threads N]
//   koi gateway keygen --tenant T          a new API key and the hash line for the config
//   koi gateway usage --store S --tenant T --since 1d [--config F for prices]
//   koi gateway rollout --admin URL --admin-key K --model M --from v1 --to v2 --steps 10,50,100
#include <signal.h>

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

#include "cli/command.h"
#include "gateway/gateway.h"
#include "net/client.h"
#include "gateway/rollout.h"
#include "gateway/usage_report.h"

namespace koi::cli {
namespace {

namespace gw = koi::gateway;
namespace json = boost::json;

struct ServeOptions {
  std::string config;
  std::optional<int> port, admin_port;
  std::optional<std::string> store;
  int threads = 0;
};

int run_gateway(const ServeOptions& o) {
  auto config = gw::load_config(o.config);
  if (!config.ok()) return fail(config.status().message());
  if (o.port) config->port = *o.port;
  if (o.admin_port) config->admin_port = *o.admin_port;
  if (o.store) config->store = *o.store;
  auto store = gw::open_store(config->store);
  if (!store.ok()) return fail(store.status().message());
  // Block the stop signals before the worker threads start, so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  const int threads = o.threads > 0 ? o.threads : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  auto gateway = gw::Gateway::start(*config, std::move(*store), threads);
  if (!gateway.ok()) return fail(gateway.status().message());
  std::printf("listening on http://%s:%d\n", config->host.c_str(), (*gateway)->port());
  if ((*gateway)->grpc_port()) std::printf("grpc on %s:%d\n", config->grpc_host.c_str(), (*gateway)->grpc_port());
  if ((*gateway)->admin_port()) std::printf("admin on http://%s:%d\n", config->admin_host.c_str(), (*gateway)->admin_port());
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop_signals, &sig);
  (*gateway)->stop();
  return 0;
}

Runner setup_gateway(CLI::App* app) {
  auto o = std::make_shared<ServeOptions>();
  app->add_option("--config", o->config, "gateway YAML file (models, tenants, limits, routing, grpc_listen for the gRPC API)");
  app->add_option("--port", o->port, "API port (overrides listen:; 0 picks a free one)");
  app->add_option("--admin-port", o->admin_port, "admin API port (overrides admin.listen:)");
  app->add_option("--store", o->store, "usage ledger: a SQLite path or postgres://... (overrides store:)");
  app->add_option("--threads", o->threads, "worker threads (default: all cores)");
  return [o] {
    if (o->config.empty()) return fail("koi gateway needs --config FILE; see docs/gateway.md for an example");
    if (o->port) {
      if (std::string e = port_error("--port", *o->port); !e.empty()) return fail(e);
    }
    if (o->admin_port) {
      if (std::string e = port_error("--admin-port", *o->admin_port); !e.empty()) return fail(e);
    }
    return run_gateway(*o);
  };
}

Runner setup_keygen(CLI::App* app) {
  auto tenant = std::make_shared<std::string>();
  app->add_option("--tenant", *tenant, "tenant the key belongs to")->required();
  return [tenant] {
    gw::IssuedKey k = gw::issue_key(*tenant);
    std::printf("key: %s\n# for the config file, under tenants: - name: %s  keys:\n- {id: \"%s\", hash: \"%s\"}\n",
                k.key.c_str(), tenant->c_str(), k.record.id.c_str(), k.record.hash.c_str());
    return 0;
  };
}

struct UsageOptions {
  std::string store, tenant, since = "30d", config;
};

Runner setup_usage(CLI::App* app) {
  auto o = std::make_shared<UsageOptions>();
  app->add_option("--store", o->store, "usage ledger: a SQLite path or postgres://...")->required();
  app->add_option("--tenant", o->tenant, "one tenant (default: all)");
  app->add_option("--since", o->since, "2026-11-29, 2026-11-29T10:00:00, 2h, 7d or Unix ms")->capture_default_str();
  app->add_option("--config", o->config, "gateway YAML whose models carry the price table");
  return [o] {
    const int64_t now = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
    auto since = gw::parse_since(o->since, now);
    if (!since.ok()) return fail(since.status().message());
    std::vector<gw::ModelConfig> prices;
    if (!o->config.empty()) {
      auto config = gw::load_config(o->config);
      if (!config.ok()) return fail(config.status().message());
      prices = config->models;
    }
    // A report only reads: a mistyped path is an error, not a new empty ledger.
    auto store = gw::open_store(o->store, {.read_only = true, .must_exist = true});
    if (!store.ok()) return fail(store.status().message());
    auto records = (*store)->query(o->tenant, *since);
    if (!records.ok()) return fail(records.status().message());
    std::fputs(gw::format_usage(gw::summarize_usage(*records, prices)).c_str(), stdout);
    return 0;
  };
}

struct RolloutOptions {
  std::string admin, admin_key, model, from, to;
  std::vector<double> steps{10, 25, 50, 100};
  double interval_s = 30;
  double max_error_rate = 0.05, max_latency_ratio = 3.0;
  int64_t min_requests = 20;
};

Result<std::map<std::string, gw::VersionWindow>> fetch_stats(const RolloutOptions& o) {
  const net::Headers auth{{"authorization", "Bearer " + o.admin_key}};
  KOI_ASSIGN_OR_RETURN(net::Response r, net::Client::fetch(o.admin + "/admin/stats", "GET", "", auth, std::chrono::seconds(5)));
  if (r.status != 200) return Status::unavailable("GET /admin/stats answered " + std::to_string(r.status) + ": " + r.body);
  json::error_code ec;
  json::value v = json::parse(r.body, ec);
  const json::value* m = (!ec && v.is_object()) ? v.as_object().if_contains(o.model) : nullptr;
  if (!m || !m->is_object()) return Status::not_found("the gateway has no model '" + o.model + "'");
  std::map<std::string, gw::VersionWindow> out;
  for (const auto& [name, s] : m->as_object()) {
    const json::object& so = s.as_object();
    out[std::string(name)] = {so.at("requests").to_number<int64_t>(), so.at("errors").to_number<int64_t>(),
                              so.at("latency_sum_s").to_number<double>()};
  }
  if (!out.count(o.from) || !out.count(o.to)) return Status::not_found("model '" + o.model + "' needs versions '" + o.from + "' and '" + o.to + "'");
  return out;
}

Status set_split(const RolloutOptions& o, double to_weight) {
  const net::Headers auth{{"authorization", "Bearer " + o.admin_key}};
  const std::string body = json::serialize(json::object{
      {"model", o.model}, {"weights", json::object{{o.from, 100 - to_weight}, {o.to, to_weight}}}});
  KOI_ASSIGN_OR_RETURN(net::Response r, net::Client::fetch(o.admin + "/admin/weights", "POST", body, auth, std::chrono::seconds(5)));
  if (r.status != 200) return Status::unavailable("POST /admin/weights answered " + std::to_string(r.status) + ": " + r.body);
  std::printf("weights: %s %.0f%%, %s %.0f%%\n", o.from.c_str(), 100 - to_weight, o.to.c_str(), to_weight);
  std::fflush(stdout);
  return ok_status();
}

gw::VersionWindow minus(const gw::VersionWindow& a, const gw::VersionWindow& b) {
  return {a.requests - b.requests, a.errors - b.errors, a.latency_sum_s - b.latency_sum_s};
}

int run_rollout(const RolloutOptions& o) {
  gw::RolloutPlan plan{o.steps, o.max_error_rate, o.max_latency_ratio, o.min_requests};
  if (Status s = gw::validate(plan); !s.ok()) return fail(s.message());
  gw::RolloutController controller(plan);
  auto before = fetch_stats(o);
  if (!before.ok()) return fail(before.status().message());
  if (Status s = set_split(o, controller.weight()); !s.ok()) return fail(s.message());
  for (;;) {
    std::this_thread::sleep_for(std::chrono::duration<double>(o.interval_s));
    auto now = fetch_stats(o);
    if (!now.ok()) return fail(now.status().message());
    const gw::VersionWindow canary = minus((*now)[o.to], (*before)[o.to]);
    const gw::VersionWindow baseline = minus((*now)[o.from], (*before)[o.from]);
    std::printf("window: %s %ld requests %ld errors %.4fs mean; %s %ld requests %ld errors %.4fs mean\n", o.to.c_str(),
                static_cast<long>(canary.requests), static_cast<long>(canary.errors), canary.mean_latency_s(), o.from.c_str(),
                static_cast<long>(baseline.requests), static_cast<long>(baseline.errors), baseline.mean_latency_s());
    switch (controller.observe(canary, baseline)) {
      case gw::RolloutAction::kHold:
        continue;
      case gw::RolloutAction::kAdvance:
        if (Status s = set_split(o, controller.weight()); !s.ok()) return fail(s.message());
        before = std::move(now);
        continue;
      case gw::RolloutAction::kRollback:
        if (Status s = set_split(o, 0); !s.ok()) return fail(s.message());
        std::printf("rolled back: %s\n", controller.reason().c_str());
        return 3;
      case gw::RolloutAction::kDone:
        std::printf("rollout complete: %s serves 100%%\n", o.to.c_str());
        return 0;
    }
  }
}

Runner setup_rollout(CLI::App* app) {
  auto o = std::make_shared<RolloutOptions>();
  app->add_option("--admin", o->admin, "admin API URL, http://HOST:PORT")->required();
  app->add_option("--admin-key", o->admin_key, "admin key")->required();
  app->add_option("--model", o->model, "model whose traffic moves")->required();
  app->add_option("--from", o->from, "the version serving now")->required();
  app->add_option("--to", o->to, "the new version")->required();
  app->add_option("--steps", o->steps, "percent of traffic to the new version per step")->delimiter(',')->capture_default_str();
  app->add_option("--interval-s", o->interval_s, "seconds per observation window")->capture_default_str();
  app->add_option("--max-error-rate", o->max_error_rate, "roll back above this error rate")->capture_default_str();
  app->add_option("--max-latency-ratio", o->max_latency_ratio, "roll back above this mean latency ratio")->capture_default_str();
  app->add_option("--min-requests", o->min_requests, "requests per window before judging")->capture_default_str();
  return [o] { return run_rollout(*o); };
}

}  // namespace
KOI_COMMAND(gateway, "API gateway: keys, limits, metering, routing, rollouts in front of koi serve replicas", setup_gateway);
KOI_SUBCOMMAND(gateway, keygen, "issue an API key (prints the key once and its hash for the config)", setup_keygen);
KOI_SUBCOMMAND(gateway, usage, "usage and cost per tenant, model and version from the ledger", setup_usage);
KOI_SUBCOMMAND(gateway, rollout, "shift traffic to a new version step by step; roll back on errors or latency", setup_rollout);
}  // namespace koi::cli
