// koi model: the model registry on the control plane (`koi cluster serve`): list models,
// describe one (versions with artifact, hash, lineage and metrics; aliases and their history;
// --at TIME: which version each alias held then), move an alias, register a version from a
// finished job. -o table|json|yaml, --server/--token or KOI_SERVER/KOI_TOKEN, -n NAMESPACE.
#include <fmt/format.h>

#include <boost/json.hpp>
#include <cstdio>

#include "cli/cluster_cli.h"
#include "cli/command.h"
#include "cluster/control_plane/object.h"

namespace koi::cli {
namespace {
namespace json = boost::json;

struct ModelFlags {
  ClusterFlags cluster;
  std::string name, alias, at;
  int version = 0;
  int64_t resource_version = 0;
  std::string from_job, checkpoint, artifact, format, eval_job, description;
};

std::string models_path(const std::string& ns) { return "/apis/v1/namespaces/" + ns + "/models"; }

std::string aliases_text(const json::value& model) {
  std::string out;
  const json::value* st = model.as_object().if_contains("status");
  const json::value* a = st && st->is_object() ? st->as_object().if_contains("aliases") : nullptr;
  if (!a || !a->is_object()) return "-";
  for (const auto& [k, v] : a->as_object()) out += fmt::format("{}{}={}", out.empty() ? "" : ",", std::string(k), json_text(v, {}));
  return out.empty() ? "-" : out;
}

std::string metrics_text(const json::value& v) {
  const json::value* m = v.is_object() ? v.as_object().if_contains("metrics") : nullptr;
  if (!m || !m->is_object()) return "-";
  // The quality figures first; the table stays readable (-o yaml has them all).
  std::string out;
  int shown = 0;
  for (const char* k : {"perplexity", "val_loss", "loss"}) {
    const json::value* x = m->as_object().if_contains(k);
    if (x && x->is_number() && shown++ < 2) out += fmt::format("{}{}={:.4g}", out.empty() ? "" : " ", k, x->to_number<double>());
  }
  return out.empty() ? "-" : out;
}

std::string size_text(double bytes) {
  if (bytes >= 1 << 30) return fmt::format("{:.1f}GiB", bytes / (1 << 30));
  if (bytes >= 1 << 20) return fmt::format("{:.1f}MiB", bytes / (1 << 20));
  if (bytes >= 1 << 10) return fmt::format("{:.1f}KiB", bytes / (1 << 10));
  return fmt::format("{:.0f}B", bytes);
}

int run_list(const ModelFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  auto list = client->call("GET", models_path(ns));
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.cluster.output)) return 0;
  const double now = cluster::wall_seconds();
  std::vector<std::vector<std::string>> rows{{"NAME", "LATEST", "ALIASES", "AGE", "DESCRIPTION"}};
  for (const json::value& m : list->at("items").as_array()) {
    rows.push_back({json_text(m, {"metadata", "name"}), json_text(m, {"status", "latestVersion"}), aliases_text(m),
                    age_of(json_number(m, {"metadata", "creationTime"}), now), json_text(m, {"spec", "description"})});
  }
  print_table(rows);
  return 0;
}

int run_describe(const ModelFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  const std::string path = models_path(ns) + "/" + f.name;
  auto model = client->call("GET", path + (f.at.empty() ? "" : "?at=" + f.at));
  if (!model.ok()) return fail(model.status().message());
  auto versions = client->call("GET", path + "/versions");
  if (!versions.ok()) return fail(versions.status().message());
  if (f.cluster.output != "table") {
    json::value both = json::object{{"model", *model}, {"versions", versions->at("items")}};
    (void)print_structured(both, f.cluster.output);
    return 0;
  }
  const json::value& m = *model;
  const double now = cluster::wall_seconds();
  std::printf("Name:         %s\n", json_text(m, {"metadata", "name"}).c_str());
  std::printf("Namespace:    %s\n", json_text(m, {"metadata", "namespace"}).c_str());
  std::printf("Description:  %s\n", json_text(m, {"spec", "description"}).c_str());
  std::printf("Latest:       %s\n", json_text(m, {"status", "latestVersion"}).c_str());
  std::printf("Aliases:      %s\n", aliases_text(m).c_str());
  if (!f.at.empty()) {
    const json::value at = m.at("status").at("aliasesAt");
    std::string held;
    for (const auto& [k, v] : at.at("aliases").as_object()) {
      held += fmt::format("{}{}={}", held.empty() ? "" : ",", std::string(k), v.as_int64() ? json_text(v, {}) : "none");
    }
    std::printf("Aliases at %s: %s\n", json_text(at, {"time"}).c_str(), held.empty() ? "none" : held.c_str());
  }
  std::printf("Versions:\n");
  std::vector<std::vector<std::string>> rows{{"  VERSION", "FORMAT", "SIZE", "SHA256", "JOB", "STEP", "METRICS", "AGE", "PATH"}};
  for (const json::value& v : versions->at("items").as_array()) {
    const json::value& spec = v.at("spec");
    rows.push_back({"  " + json_text(spec, {"version"}), json_text(spec, {"artifact", "format"}),
                    size_text(json_number(spec, {"artifact", "sizeBytes"})), json_text(spec, {"artifact", "sha256"}).substr(0, 12),
                    json_text(spec, {"lineage", "job"}), json_text(spec, {"lineage", "step"}), metrics_text(spec),
                    age_of(json_number(v, {"metadata", "creationTime"}), now), json_text(spec, {"artifact", "path"})});
  }
  print_table(rows);
  std::printf("Alias history:\n");
  rows = {{"  TIME", "ALIAS", "VERSION", "PREVIOUS", "BY"}};
  if (const json::value* h = m.at("status").as_object().if_contains("aliasHistory"); h && h->is_array()) {
    for (const json::value& e : h->as_array()) {
      const std::string prev = json_text(e, {"previous"});
      rows.push_back({"  " + json_text(e, {"time"}), json_text(e, {"alias"}), json_text(e, {"version"}),
                      prev == "0" ? "-" : prev, json_text(e, {"by"})});
    }
  }
  print_table(rows);
  return 0;
}

int run_alias(const ModelFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  json::object body{{"version", f.version}};
  if (f.resource_version > 0) body["resourceVersion"] = f.resource_version;
  auto m = client->call("PUT", models_path(ns) + "/" + f.name + "/aliases/" + f.alias, json::serialize(body));
  if (!m.ok()) return fail(m.status().message());
  if (*print_structured(*m, f.cluster.output)) return 0;
  std::printf("model/%s alias %s -> version %d\n", f.name.c_str(), f.alias.c_str(), f.version);
  return 0;
}

int run_register(const ModelFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  json::object body{{"fromJob", f.from_job}};
  if (!f.checkpoint.empty()) body["checkpoint"] = f.checkpoint;
  if (!f.artifact.empty()) body["artifact"] = f.artifact;
  if (!f.format.empty()) body["format"] = f.format;
  if (!f.eval_job.empty()) body["evalJob"] = f.eval_job;
  if (!f.description.empty()) body["description"] = f.description;
  auto v = client->call("POST", models_path(ns) + "/" + f.name + "/versions", json::serialize(body));
  if (!v.ok()) return fail(v.status().message());
  if (*print_structured(*v, f.cluster.output)) return 0;
  const json::value& spec = v->at("spec");
  std::printf("model/%s version %s registered (%s, %s, sha256 %s)\n", f.name.c_str(), json_text(spec, {"version"}).c_str(),
              json_text(spec, {"artifact", "format"}).c_str(), size_text(json_number(spec, {"artifact", "sizeBytes"})).c_str(),
              json_text(spec, {"artifact", "sha256"}).c_str());
  return 0;
}

Runner setup_model(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

Runner setup_list(CLI::App* app) {
  auto f = std::make_shared<ModelFlags>();
  add_cluster_flags(app, &f->cluster);
  return [f] { return run_list(*f); };
}

Runner setup_describe(CLI::App* app) {
  auto f = std::make_shared<ModelFlags>();
  add_cluster_flags(app, &f->cluster);
  app->add_option("name", f->name, "the model's name")->required();
  app->add_option("--at", f->at, "also show which version each alias held at TIME (RFC 3339 or unix seconds)");
  return [f] { return run_describe(*f); };
}

Runner setup_alias(CLI::App* app) {
  auto f = std::make_shared<ModelFlags>();
  add_cluster_flags(app, &f->cluster);
  app->add_option("name", f->name, "the model's name")->required();
  app->add_option("alias", f->alias, "the alias (production, canary, ...)")->required();
  app->add_option("version", f->version, "the version it moves to")->required();
  app->add_option("--resource-version", f->resource_version,
                  "move only if the model is still at this resourceVersion (409 otherwise)");
  return [f] { return run_alias(*f); };
}

Runner setup_register(CLI::App* app) {
  auto f = std::make_shared<ModelFlags>();
  add_cluster_flags(app, &f->cluster);
  app->add_option("name", f->name, "the model's name (created at its first version)")->required();
  app->add_option("--from-job", f->from_job, "the Succeeded job the weights come from (lineage)")->required();
  app->add_option("--checkpoint", f->checkpoint, "its checkpoint (ckpt-<step> or a path; default: the newest)");
  app->add_option("--artifact", f->artifact, "or an export of it (absolute path: a GGUF file or HF directory)");
  app->add_option("--format", f->format, "gguf, hf or koi (default: found from the artifact)");
  app->add_option("--eval-job", f->eval_job, "record the metrics this eval job reported");
  app->add_option("--description", f->description, "the model's description (at its first version)");
  return [f] { return run_register(*f); };
}

}  // namespace
KOI_COMMAND(model, "the model registry: versions with lineage, aliases and their history", setup_model);
KOI_SUBCOMMAND(model, list, "list the models of a namespace with their aliases", setup_list);
KOI_SUBCOMMAND(model, describe, "a model's versions, aliases and alias history (--at TIME)", setup_describe);
KOI_SUBCOMMAND(model, alias, "move an alias: koi model alias NAME ALIAS VERSION", setup_alias);
KOI_SUBCOMMAND(model, register, "register a version from a finished job's checkpoint or export", setup_register);
}  // namespace koi::cli
