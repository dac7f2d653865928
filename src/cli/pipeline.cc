// koi pipeline: pipelines on the control plane (`koi cluster serve`): submit a manifest, list,
// describe one (every step's phase, job, metrics and message, then the events), cancel (the
// running job steps are cancelled). -o table|json|yaml, --server/--token or
// KOI_SERVER/KOI_TOKEN, -n NAMESPACE.
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

struct PipelineFlags {
  ClusterFlags cluster;
  std::string file, name;
};

std::string pipelines_path(const std::string& ns) { return "/apis/v1/namespaces/" + ns + "/pipelines"; }

// "3/5": steps Succeeded of all.
std::string progress(const json::value& p) {
  const json::value* st = p.as_object().if_contains("status");
  const json::value* steps = st && st->is_object() ? st->as_object().if_contains("steps") : nullptr;
  if (!steps || !steps->is_array()) return "-";
  int done = 0;
  for (const json::value& s : steps->as_array()) done += json_text(s, {"phase"}) == "Succeeded";
  return fmt::format("{}/{}", done, steps->as_array().size());
}

std::string step_kind(const json::value& spec_step) {
  for (const char* k : {"job", "gate", "register", "promote", "deploy"}) {
    if (spec_step.as_object().contains(k)) return k;
  }
  return "?";
}

int run_submit(const PipelineFlags& f) {
  auto text = read_file(f.file);
  if (!text.ok()) return fail(text.status().message());
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  auto p = client->call("POST", pipelines_path(ns), *text);
  if (!p.ok()) return fail(f.file + ": " + p.status().message());
  if (*print_structured(*p, f.cluster.output)) return 0;
  std::printf("pipeline/%s submitted to %s (%s steps)\n", json_text(*p, {"metadata", "name"}).c_str(), ns.c_str(),
              progress(*p).substr(progress(*p).find('/') + 1).c_str());
  return 0;
}

int run_list(const PipelineFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  auto list = client->call("GET", pipelines_path(ns));
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.cluster.output)) return 0;
  const double now = cluster::wall_seconds();
  std::vector<std::vector<std::string>> rows{{"NAME", "PHASE", "STEPS", "AGE", "MESSAGE"}};
  for (const json::value& p : list->at("items").as_array()) {
    rows.push_back({json_text(p, {"metadata", "name"}), json_text(p, {"status", "phase"}), progress(p),
                    age_of(json_number(p, {"metadata", "creationTime"}), now), json_text(p, {"status", "message"})});
  }
  print_table(rows);
  return 0;
}

int run_describe(const PipelineFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  auto p = client->call("GET", pipelines_path(ns) + "/" + f.name);
  if (!p.ok()) return fail(p.status().message());
  auto events = client->call("GET", pipelines_path(ns) + "/" + f.name + "/events");
  if (!events.ok()) return fail(events.status().message());
  if (f.cluster.output != "table") {
    json::value both = json::object{{"pipeline", *p}, {"events", events->at("items")}};
    (void)print_structured(both, f.cluster.output);
    return 0;
  }
  std::printf("Name:         %s\n", json_text(*p, {"metadata", "name"}).c_str());
  std::printf("Namespace:    %s\n", json_text(*p, {"metadata", "namespace"}).c_str());
  std::printf("Phase:        %s\n", json_text(*p, {"status", "phase"}).c_str());
  std::printf("Reason:       %s\n", json_text(*p, {"status", "reason"}).c_str());
  std::printf("Message:      %s\n", json_text(*p, {"status", "message"}).c_str());
  std::printf("Steps:\n");
  std::vector<std::vector<std::string>> rows{{"  STEP", "KIND", "PHASE", "JOB/MODEL", "MESSAGE"}};
  const json::array& spec_steps = p->at("spec").at("steps").as_array();
  const json::array& steps = p->at("status").at("steps").as_array();
  for (size_t i = 0; i < steps.size() && i < spec_steps.size(); ++i) {
    const json::value& s = steps[i];
    std::string target = json_text(s, {"job"});
    if (target.empty() && !json_text(s, {"model"}).empty()) {
      target = json_text(s, {"model"}) + (json_text(s, {"version"}).empty() ? "" : " v" + json_text(s, {"version"}));
    }
    rows.push_back({"  " + json_text(s, {"name"}), step_kind(spec_steps[i]), json_text(s, {"phase"}), target.empty() ? "-" : target,
                    json_text(s, {"message"})});
  }
  print_table(rows);
  std::printf("Events:\n");
  rows = {{"  TIME", "TYPE", "REASON", "MESSAGE"}};
  for (const json::value& e : events->at("items").as_array()) {
    rows.push_back({"  " + json_text(e, {"time"}), json_text(e, {"type"}), json_text(e, {"reason"}), json_text(e, {"message"})});
  }
  print_table(rows);
  return 0;
}

int run_cancel(const PipelineFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!cluster_connect(f.cluster, &client, &ns, &code)) return code;
  auto p = client->call("DELETE", pipelines_path(ns) + "/" + f.name);
  if (!p.ok()) return fail(p.status().message());
  if (*print_structured(*p, f.cluster.output)) return 0;
  const std::string phase = json_text(*p, {"status", "phase"});
  if (phase == "Succeeded" || phase == "Failed" || phase == "Cancelled") {
    std::printf("pipeline/%s already ended (%s)\n", f.name.c_str(), phase.c_str());
  } else {
    std::printf("pipeline/%s cancelling\n", f.name.c_str());
  }
  return 0;
}

Runner setup_pipeline(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

template <int (*Run)(const PipelineFlags&)>
Runner setup_named(CLI::App* app) {
  auto f = std::make_shared<PipelineFlags>();
  add_cluster_flags(app, &f->cluster);
  app->add_option("name", f->name, "the pipeline's name")->required();
  return [f] { return Run(*f); };
}

Runner setup_submit(CLI::App* app) {
  auto f = std::make_shared<PipelineFlags>();
  add_cluster_flags(app, &f->cluster);
  app->add_option("-f,--filename", f->file, "the Pipeline manifest (YAML or JSON)")->required();
  return [f] { return run_submit(*f); };
}

Runner setup_list(CLI::App* app) {
  auto f = std::make_shared<PipelineFlags>();
  add_cluster_flags(app, &f->cluster);
  return [f] { return run_list(*f); };
}

}  // namespace
KOI_COMMAND(pipeline, "pipelines on the control plane: steps (jobs, gates, register, promote) with dependencies",
            setup_pipeline);
KOI_SUBCOMMAND(pipeline, submit, "submit a Pipeline manifest (-f FILE)", setup_submit);
KOI_SUBCOMMAND(pipeline, list, "list the pipelines of a namespace", setup_list);
KOI_SUBCOMMAND(pipeline, describe, "a pipeline's steps (phase, job, metrics) and its events", setup_named<run_describe>);
KOI_SUBCOMMAND(pipeline, cancel, "cancel a pipeline and its running job steps", setup_named<run_cancel>);
}  // namespace koi::cli
