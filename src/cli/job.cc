// koi job: submit, list, describe, logs, events and cancel jobs on the control plane
// (`koi cluster serve`), in kubectl's manner: -o table|json|yaml, --server/--token or
// KOI_SERVER/KOI_TOKEN, -n NAMESPACE (default: the token's tenant).
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

struct JobFlags {
  ClusterFlags cluster;
  std::string file;
  std::string name;
  bool follow = false;
  bool all_namespaces = false;
  int replica = 0;
  int attempt = 0;
};

std::string jobs_path(const std::string& ns) { return "/apis/v1/namespaces/" + ns + "/jobs"; }

// Opens the client and the namespace, or prints the error: returns false then.
bool connect(const JobFlags& f, std::optional<cluster::ApiClient>* client, std::string* ns, int* code) {
  return cluster_connect(f.cluster, client, ns, code);
}

int run_submit(const JobFlags& f) {
  if (f.file.empty()) return fail("koi job submit needs -f FILE (a Job manifest in YAML or JSON)");
  auto text = read_file(f.file);
  if (!text.ok()) return fail(text.status().message());
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!connect(f, &client, &ns, &code)) return code;
  auto job = client->call("POST", jobs_path(ns), *text);
  if (!job.ok()) return fail(f.file + ": " + job.status().message());
  auto printed = print_structured(*job, f.cluster.output);
  if (!*printed) std::printf("job/%s submitted to %s (queue %s)\n", json_text(*job, {"metadata", "name"}).c_str(), ns.c_str(),
                             json_text(*job, {"spec", "queue"}).c_str());
  return 0;
}

int run_list(const JobFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  Result<json::value> list = Status::internal("unset");
  if (f.all_namespaces) {
    auto c = cluster_client(f.cluster);
    if (!c.ok()) return fail(c.status().message());
    client.emplace(*c);
    list = client->call("GET", "/apis/v1/jobs");
  } else {
    if (!connect(f, &client, &ns, &code)) return code;
    list = client->call("GET", jobs_path(ns));
  }
  if (!list.ok()) return fail(list.status().message());
  if (*print_structured(*list, f.cluster.output)) return 0;
  const double now = cluster::wall_seconds();
  std::vector<std::vector<std::string>> rows{{"NAME", "KIND", "PHASE", "QUEUE", "REPLICAS", "RESTARTS", "AGE", "MESSAGE"}};
  if (f.all_namespaces) rows[0].insert(rows[0].begin(), "NAMESPACE");
  for (const json::value& j : list->at("items").as_array()) {
    rows.push_back({json_text(j, {"metadata", "name"}), json_text(j, {"spec", "kind"}), json_text(j, {"status", "phase"}),
                    json_text(j, {"spec", "queue"}), json_text(j, {"spec", "replicas"}), json_text(j, {"status", "restarts"}),
                    age_of(json_number(j, {"metadata", "creationTime"}), now), json_text(j, {"status", "message"})});
    if (f.all_namespaces) rows.back().insert(rows.back().begin(), json_text(j, {"metadata", "namespace"}));
  }
  print_table(rows);
  return 0;
}

int run_describe(const JobFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!connect(f, &client, &ns, &code)) return code;
  auto job = client->call("GET", jobs_path(ns) + "/" + f.name);
  if (!job.ok()) return fail(job.status().message());
  auto events = client->call("GET", jobs_path(ns) + "/" + f.name + "/events");
  if (!events.ok()) return fail(events.status().message());
  if (f.cluster.output != "table") {
    json::value both = json::object{{"job", *job}, {"events", events->at("items")}};
    (void)print_structured(both, f.cluster.output);
    return 0;
  }
  const json::value& j = *job;
  std::printf("Name:         %s\n", json_text(j, {"metadata", "name"}).c_str());
  std::printf("Namespace:    %s\n", json_text(j, {"metadata", "namespace"}).c_str());
  std::printf("Kind:         %s\n", json_text(j, {"spec", "kind"}).c_str());
  std::printf("Queue:        %s (priority %s, preemptible %s)\n", json_text(j, {"spec", "queue"}).c_str(),
              json_text(j, {"spec", "priority"}).c_str(), json_text(j, {"spec", "preemptible"}).c_str());
  std::printf("Replicas:     %s x {cpu %s, memoryMiB %s, gpu %s%s}\n", json_text(j, {"spec", "replicas"}).c_str(),
              json_text(j, {"spec", "resources", "cpu"}).c_str(), json_text(j, {"spec", "resources", "memoryMiB"}).c_str(),
              json_text(j, {"spec", "resources", "gpu"}).c_str(),
              json_text(j, {"spec", "resources", "gpuType"}).empty() ? "" : (" " + json_text(j, {"spec", "resources", "gpuType"})).c_str());
  std::printf("Phase:        %s\n", json_text(j, {"status", "phase"}).c_str());
  std::printf("Reason:       %s\n", json_text(j, {"status", "reason"}).c_str());
  std::printf("Message:      %s\n", json_text(j, {"status", "message"}).c_str());
  std::printf("Restarts:     %s of %s (attempts %s, restarts not counted: %s)\n", json_text(j, {"status", "restarts"}).c_str(),
              json_text(j, {"spec", "restartPolicy", "maxRestarts"}).c_str(), json_text(j, {"status", "attempts"}).c_str(),
              json_text(j, {"status", "infraRestarts"}).c_str());
  if (!json_text(j, {"status", "lastSignal"}).empty()) {
    std::printf("Last exit:    signal %s\n", json_text(j, {"status", "lastSignal"}).c_str());
  } else if (!json_text(j, {"status", "lastExitCode"}).empty()) {
    std::printf("Last exit:    code %s\n", json_text(j, {"status", "lastExitCode"}).c_str());
  }
  if (const json::value* reps = j.at("status").as_object().if_contains("replicas"); reps && !reps->as_array().empty()) {
    std::printf("Running:\n");
    int i = 0;
    for (const json::value& r : reps->as_array()) {
      std::printf("  %d  %s  node %s  gpus %s  %s\n", i++, json_text(r, {"id"}).c_str(), json_text(r, {"node"}).c_str(),
                  json::serialize(r.at("gpus")).c_str(), json_text(r, {"dir"}).c_str());
    }
  }
  if (const json::value* conds = j.at("status").as_object().if_contains("conditions"); conds && !conds->as_array().empty()) {
    std::printf("Conditions:\n");
    std::vector<std::vector<std::string>> rows{{"  TYPE", "STATUS", "REASON", "MESSAGE"}};
    for (const json::value& c : conds->as_array()) {
      std::string message = json_text(c, {"message"});
      if (const size_t nl = message.find('\n'); nl != std::string::npos) message = message.substr(0, nl) + " ...";
      rows.push_back({"  " + json_text(c, {"type"}), json_text(c, {"status"}), json_text(c, {"reason"}), message});
    }
    print_table(rows);
  }
  const std::string tail = json_text(j, {"status", "logTail"});
  if (!tail.empty()) std::printf("Log tail:\n%s%s", tail.c_str(), tail.ends_with('\n') ? "" : "\n");
  std::printf("Events:\n");
  std::vector<std::vector<std::string>> rows{{"  TIME", "TYPE", "REASON", "MESSAGE"}};
  for (const json::value& e : events->at("items").as_array()) {
    rows.push_back({"  " + json_text(e, {"time"}), json_text(e, {"type"}), json_text(e, {"reason"}), json_text(e, {"message"})});
  }
  print_table(rows);
  return 0;
}

int run_events(const JobFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!connect(f, &client, &ns, &code)) return code;
  auto events = client->call("GET", jobs_path(ns) + "/" + f.name + "/events");
  if (!events.ok()) return fail(events.status().message());
  if (*print_structured(*events, f.cluster.output)) return 0;
  std::vector<std::vector<std::string>> rows{{"TIME", "TYPE", "REASON", "MESSAGE"}};
  for (const json::value& e : events->at("items").as_array()) {
    rows.push_back({json_text(e, {"time"}), json_text(e, {"type"}), json_text(e, {"reason"}), json_text(e, {"message"})});
  }
  print_table(rows);
  return 0;
}

int run_logs(const JobFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!connect(f, &client, &ns, &code)) return code;
  std::string path = jobs_path(ns) + "/" + f.name + "/logs?replica=" + std::to_string(f.replica);
  if (f.attempt > 0) path += "&attempt=" + std::to_string(f.attempt);
  if (f.follow) {
    Status s = client->stream(path + "&follow=1", [](std::string_view data) {
      std::fwrite(data.data(), 1, data.size(), stdout);
      std::fflush(stdout);
    });
    return s.ok() ? 0 : fail(s.message());
  }
  auto text = client->text(path);
  if (!text.ok()) return fail(text.status().message());
  std::fwrite(text->data(), 1, text->size(), stdout);
  return 0;
}

int run_cancel(const JobFlags& f) {
  std::optional<cluster::ApiClient> client;
  std::string ns;
  int code = 0;
  if (!connect(f, &client, &ns, &code)) return code;
  auto job = client->call("DELETE", jobs_path(ns) + "/" + f.name);
  if (!job.ok()) return fail(job.status().message());
  if (*print_structured(*job, f.cluster.output)) return 0;
  const std::string phase = json_text(*job, {"status", "phase"});
  if (phase == "Succeeded" || phase == "Failed" || phase == "Cancelled") {
    std::printf("job/%s already ended (%s)\n", f.name.c_str(), phase.c_str());
  } else {
    std::printf("job/%s cancelling\n", f.name.c_str());
  }
  return 0;
}

Runner setup_job(CLI::App* app) {
  app->require_subcommand(1);
  return {};
}

template <int (*Run)(const JobFlags&)>
Runner setup_named(CLI::App* app, std::shared_ptr<JobFlags> f, bool name) {
  add_cluster_flags(app, &f->cluster);
  if (name) app->add_option("name", f->name, "the job's name")->required();
  return [f] { return Run(*f); };
}

Runner setup_submit(CLI::App* app) {
  auto f = std::make_shared<JobFlags>();
  app->add_option("-f,--filename", f->file, "the Job manifest (YAML or JSON)")->required();
  return setup_named<run_submit>(app, f, false);
}
Runner setup_list(CLI::App* app) {
  auto f = std::make_shared<JobFlags>();
  app->add_flag("-A,--all-namespaces", f->all_namespaces, "every namespace (admin tokens)");
  return setup_named<run_list>(app, f, false);
}
Runner setup_describe(CLI::App* app) { return setup_named<run_describe>(app, std::make_shared<JobFlags>(), true); }
Runner setup_events(CLI::App* app) { return setup_named<run_events>(app, std::make_shared<JobFlags>(), true); }
Runner setup_cancel(CLI::App* app) { return setup_named<run_cancel>(app, std::make_shared<JobFlags>(), true); }
Runner setup_logs(CLI::App* app) {
  auto f = std::make_shared<JobFlags>();
  app->add_flag("-f,--follow", f->follow, "stream the log until the attempt ends");
  app->add_option("--replica", f->replica, "which replica of the gang")->capture_default_str();
  app->add_option("--attempt", f->attempt, "which attempt (default: the latest)");
  return setup_named<run_logs>(app, f, true);
}

}  // namespace
KOI_COMMAND(job, "jobs on the control plane: submit, list, describe, logs, events, cancel", setup_job);
KOI_SUBCOMMAND(job, submit, "submit a Job manifest (-f FILE)", setup_submit);
KOI_SUBCOMMAND(job, list, "list the jobs of a namespace", setup_list);
KOI_SUBCOMMAND(job, describe, "a job's spec, status, why it waits, and its events", setup_describe);
KOI_SUBCOMMAND(job, logs, "a replica's log (-f follows it)", setup_logs);
KOI_SUBCOMMAND(job, events, "a job's events: every transition with its cause", setup_events);
KOI_SUBCOMMAND(job, cancel, "cancel a job (SIGTERM, then SIGKILL after its grace period)", setup_cancel);
}  // namespace koi::cli
