// koi deploy: Deployments on the control plane (`koi cluster serve`): apply a manifest, show
// their status, roll back, delete; in kubectl's manner (-o table|json|yaml, --server/--token
// or KOI_SERVER/KOI_TOKEN, -n NAMESPACE, default the token's tenant). docs/cluster.md.
#include <fmt/format.h>

#include <boost/json.hpp>
#include <cstdio>

#include "base/file.h"
#include "cli/cluster_cli.h"
#include "cli/command.h"
#include "cluster/control_plane/object.h"

namespace koi::cli {
namespace {
namespace json = boost::json;

struct DeployFlags {
  ClusterFlags cluster;
  std::string file;
  std::string name;
  bool all_namespaces = false;
};

const json::value* at(const json::value& v, std::initializer_list<const char*> path) {
  const json::value* cur = &v;
  for (const char* k : path) {
    if (!cur->is_object() || !(cur = cur->as_object().if_contains(k))) return nullptr;
  }
  return cur;
}

std::string path_of(const std::string& ns) { return "/apis/v1/namespaces/" + ns + "/deployments"; }

struct Session {
  std::optional<cluster::ApiClient> client;
  std::string ns;
};

// The client and the namespace, or the error printed (returns the exit code then).
std::optional<int> connect(const DeployFlags& f, Session* s) {
  auto c = cluster_client(f.cluster);
  if (!c.ok()) return fail(c.status().message());
  s->client.emplace(*c);
  auto n = cluster_namespace(*s->client, f.cluster);
  if (!n.ok()) return fail(n.status().message());
  s->ns = *n;
  return std::nullopt;
}

// "v2: 1/1 ready, 90%; v3: 1/1 ready, 10%"
std::string versions_of(const json::value& d) {
  std::string out;
  const json::value* vs = at(d, {"status", "versions"});
  if (!vs || !vs->is_array()) return out;
  for (const json::value& v : vs->as_array()) {
    if (!out.empty()) out += "; ";
    out += fmt::format("v{}: {}/{} ready, {}%", json_text(v, {"version"}), json_text(v, {"ready"}), json_text(v, {"replicas"}), json_text(v, {"weight"}));
  }
  return out;
}

int run_apply(const DeployFlags& f) {
  auto text = read_file(f.file);
  if (!text.ok()) return fail(text.status().message());
  Session s;
  if (auto code = connect(f, &s)) return *code;
  auto d = s.client->call("POST", path_of(s.ns), *text);
  if (!d.ok()) return fail(f.file + ": " + d.status().message());
  if (*print_structured(*d, f.cluster.output)) return 0;
  std::printf("deployment/%s applied in %s (model %s, route %s)\n", json_text(*d, {"metadata", "name"}).c_str(), s.ns.c_str(),
              json_text(*d, {"spec", "model"}).c_str(), json_text(*d, {"spec", "route"}).c_str());
  return 0;
}

void print_one(const json::value& d, const json::value& events) {
  std::printf("Name:        %s\n", json_text(d, {"metadata", "name"}).c_str());
  std::printf("Namespace:   %s\n", json_text(d, {"metadata", "namespace"}).c_str());
  std::printf("Model:       %s -> v%s (%s)\n", json_text(d, {"spec", "model"}).c_str(), json_text(d, {"status", "version"}).c_str(),
              json_text(d, {"status", "artifact"}).c_str());
  std::printf("Route:       %s\n", json_text(d, {"spec", "route"}).c_str());
  std::printf("Replicas:    %s desired (min %s, max %s); %s\n", json_text(d, {"status", "desiredReplicas"}).c_str(),
              json_text(d, {"spec", "replicas", "min"}).c_str(), json_text(d, {"spec", "replicas", "max"}).c_str(),
              json_text(d, {"status", "autoscale", "message"}).c_str());
  std::printf("Phase:       %s (%s)\n", json_text(d, {"status", "phase"}).c_str(), json_text(d, {"status", "reason"}).c_str());
  std::printf("Message:     %s\n", json_text(d, {"status", "message"}).c_str());
  std::printf("Versions:    %s\n", versions_of(d).c_str());
  if (at(d, {"status", "lastRollback"})) {
    std::printf("Rolled back: v%s -> v%s at %s: %s%s (since %s)\n", json_text(d, {"status", "lastRollback", "fromVersion"}).c_str(),
                json_text(d, {"status", "lastRollback", "toVersion"}).c_str(), json_text(d, {"status", "lastRollback", "time"}).c_str(),
                json_text(d, {"status", "lastRollback", "slo"}).empty() ? "" : (json_text(d, {"status", "lastRollback", "slo"}) + ": ").c_str(),
                json_text(d, {"status", "lastRollback", "message"}).c_str(), json_text(d, {"status", "lastRollback", "since"}).c_str());
  }
  std::vector<std::vector<std::string>> rows{{"  REPLICA", "VERSION", "URL", "READY", "STATE"}};
  if (const json::value* reps = at(d, {"status", "replicas"}); reps && reps->is_array()) {
    for (const json::value& r : reps->as_array()) {
      const std::string state = json_text(r, {"draining"}) == "true" ? "draining" : !json_text(r, {"waiting"}).empty() ? json_text(r, {"waiting"})
                              : json_text(r, {"registered"}) == "true" ? "serving" : "starting";
      rows.push_back({"  " + json_text(r, {"job"}), "v" + json_text(r, {"version"}), json_text(r, {"url"}), json_text(r, {"ready"}), state});
    }
  }
  print_table(rows);
  std::printf("Events:\n");
  std::vector<std::vector<std::string>> ev{{"  TIME", "TYPE", "REASON", "MESSAGE"}};
  if (const json::value* items = at(events, {"items"}); items && items->is_array()) {
    for (const json::value& e : items->as_array()) {
      ev.push_back({"  " + json_text(e, {"time"}), json_text(e, {"type"}), json_text(e, {"reason"}), json_text(e, {"message"})});
    }
  }
  print_table(ev);
}

int run_status(const DeployFlags& f) {
  Session s;
  if (auto code = connect(f, &s)) return *code;
  if (!f.name.empty()) {
    auto d = s.client->call("GET", path_of(s.ns) + "/" + f.name);
    if (!d.ok()) return fail(d.status().message());
    auto events = s.client->call("GET", path_of(s.ns) + "/" + f.name + "/events");
    if (!events.ok()) return fail(events.status().message());
    if (f.cluster.output != "table") {
      (void)print_structured(json::object{{"deployment", *d}, {"events", events->at("items")}}, f.cluster.output);
      return 0;
    }
    print_one(*d, *events);
    return 0;
  }
  auto list = s.client->call("GET", path_of(s.ns));
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.cluster.output)) return 0;
  const double now = cluster::wall_seconds();
  std::vector<std::vector<std::string>> rows{{"NAME", "MODEL", "VERSION", "ROUTE", "REPLICAS", "PHASE", "AGE", "VERSIONS", "MESSAGE"}};
  for (const json::value& d : list->at("items").as_array()) {
    const json::value* t = at(d, {"metadata", "creationTime"});
    rows.push_back({json_text(d, {"metadata", "name"}), json_text(d, {"spec", "model"}), "v" + json_text(d, {"status", "version"}),
                    json_text(d, {"spec", "route"}), json_text(d, {"status", "desiredReplicas"}), json_text(d, {"status", "phase"}),
                    age_of(t && t->is_number() ? t->to_number<double>() : now, now), versions_of(d),
                    json_text(d, {"status", "message"})});
  }
  print_table(rows);
  return 0;
}

int run_rollback(const DeployFlags& f) {
  Session s;
  if (auto code = connect(f, &s)) return *code;
  auto d = s.client->call("POST", path_of(s.ns) + "/" + f.name + "/rollback");
  if (!d.ok()) return fail(d.status().message());
  if (*print_structured(*d, f.cluster.output)) return 0;
  const bool rolling = at(*d, {"status", "rollout"}) != nullptr;
  std::printf("deployment/%s: rollback requested (%s); follow it with koi deploy status %s\n", f.name.c_str(),
              rolling ? "the rollout in progress is abandoned" : ("back to v" + json_text(*d, {"status", "previousVersion"})).c_str(),
              f.name.c_str());
  return 0;
}

int run_delete(const DeployFlags& f) {
  Session s;
  if (auto code = connect(f, &s)) return *code;
  auto d = s.client->call("DELETE", path_of(s.ns) + "/" + f.name);
  if (!d.ok()) return fail(d.status().message());
  if (*print_structured(*d, f.cluster.output)) return 0;
  std::printf("deployment/%s: deleting (its replicas drain, then stop)\n", f.name.c_str());
  return 0;
}

Runner setup_deploy(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

template <int (*Run)(const DeployFlags&)>
Runner setup_with(CLI::App* app, std::shared_ptr<DeployFlags> f, int name) {  // name: 0 none, 1 required, 2 optional
  add_cluster_flags(app, &f->cluster);
  if (name == 1) app->add_option("name", f->name, "the deployment's name")->required();
  if (name == 2) app->add_option("name", f->name, "one deployment (default: all of the namespace)");
  return [f] { return Run(*f); };
}

Runner setup_apply(CLI::App* app) {
  auto f = std::make_shared<DeployFlags>();
  app->add_option("-f,--filename", f->file, "the Deployment manifest (YAML or JSON)")->required();
  return setup_with<run_apply>(app, f, 0);
}
Runner setup_status(CLI::App* app) { return setup_with<run_status>(app, std::make_shared<DeployFlags>(), 2); }
Runner setup_rollback(CLI::App* app) { return setup_with<run_rollback>(app, std::make_shared<DeployFlags>(), 1); }
Runner setup_delete(CLI::App* app) { return setup_with<run_delete>(app, std::make_shared<DeployFlags>(), 1); }

}  // namespace
KOI_COMMAND(deploy, "deployments on the control plane: apply, status, rollback, delete", setup_deploy);
KOI_SUBCOMMAND(deploy, apply, "create or update a Deployment (-f FILE)", setup_apply);
KOI_SUBCOMMAND(deploy, status, "the deployments of a namespace, or one with its replicas and events", setup_status);
KOI_SUBCOMMAND(deploy, rollback, "abandon the rollout in progress, or go back to the previous version", setup_rollback);
KOI_SUBCOMMAND(deploy, delete, "drain and stop a deployment's replicas, then remove it", setup_delete);
}  // namespace koi::cli
