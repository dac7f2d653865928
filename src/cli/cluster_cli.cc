#include "cli/cluster_cli.h"

#include "cli/command.h"

#include <fmt/format.h>
#include <yaml-cpp/yaml.h>

#include <boost/json.hpp>
#include <cstdio>
#include <cstdlib>

namespace koi::cli {
namespace json = boost::json;

namespace {

void emit(YAML::Emitter& out, const json::value& v) {
  switch (v.kind()) {
    case json::kind::object:
      out << YAML::BeginMap;
      for (const auto& [k, x] : v.as_object()) {
        out << YAML::Key << std::string(k) << YAML::Value;
        emit(out, x);
      }
      out << YAML::EndMap;
      break;
    case json::kind::array:
      out << YAML::BeginSeq;
      for (const auto& x : v.as_array()) emit(out, x);
      out << YAML::EndSeq;
      break;
    case json::kind::string: out << std::string(v.as_string()); break;
    case json::kind::bool_: out << v.as_bool(); break;
    case json::kind::null: out << YAML::Null; break;
    case json::kind::double_: out << fmt::format("{}", v.as_double()); break;
    default: out << json::serialize(v); break;
  }
}

}  // namespace

void add_cluster_flags(CLI::App* app, ClusterFlags* f) {
  app->add_option("--server", f->server, "control plane URL (default: $KOI_SERVER)");
  app->add_option("--token", f->token, "API token (default: $KOI_TOKEN)");
  app->add_option("-o,--output", f->output, "table, json or yaml")->check(CLI::IsMember({"table", "json", "yaml"}));
  app->add_option("-n,--namespace", f->ns, "namespace (default: the token's tenant)");
}

Result<cluster::ApiClient> cluster_client(const ClusterFlags& f) {
  std::string server = f.server, token = f.token;
  if (server.empty() && std::getenv("KOI_SERVER")) server = std::getenv("KOI_SERVER");
  if (token.empty() && std::getenv("KOI_TOKEN")) token = std::getenv("KOI_TOKEN");
  if (server.empty()) return Status::invalid_argument("no control plane: pass --server http://HOST:PORT or set KOI_SERVER");
  if (token.empty()) return Status::invalid_argument("no token: pass --token T or set KOI_TOKEN");
  while (server.ends_with('/')) server.pop_back();
  return cluster::ApiClient(server, token);
}

Result<std::string> cluster_namespace(cluster::ApiClient& client, const ClusterFlags& f) {
  if (!f.ns.empty()) return f.ns;
  KOI_ASSIGN_OR_RETURN(json::value who, client.call("GET", "/apis/v1/whoami"));
  const std::string ns(who.at("namespace").as_string());
  if (ns.empty()) return Status::invalid_argument("an admin token has no namespace of its own: pass -n NAMESPACE");
  return ns;
}

bool cluster_connect(const ClusterFlags& f, std::optional<cluster::ApiClient>* client, std::string* ns, int* code) {
  auto c = cluster_client(f);
  if (!c.ok()) return *code = fail(c.status().message()), false;
  client->emplace(*c);
  auto n = cluster_namespace(**client, f);
  if (!n.ok()) return *code = fail(n.status().message()), false;
  *ns = *n;
  return true;
}

std::string json_text(const json::value& v, std::initializer_list<const char*> path) {
  const json::value* cur = &v;
  for (const char* k : path) {
    if (!cur->is_object()) return "";
    cur = cur->as_object().if_contains(k);
    if (!cur) return "";
  }
  if (cur->is_string()) return std::string(cur->as_string());
  if (cur->is_int64()) return std::to_string(cur->as_int64());
  if (cur->is_uint64()) return std::to_string(cur->as_uint64());
  if (cur->is_double()) return fmt::format("{:g}", cur->as_double());
  if (cur->is_bool()) return cur->as_bool() ? "true" : "false";
  return "";
}

double json_number(const json::value& v, std::initializer_list<const char*> path) {
  const json::value* cur = &v;
  for (const char* k : path) {
    if (!cur->is_object() || !(cur = cur->as_object().if_contains(k))) return 0;
  }
  return cur->is_number() ? cur->to_number<double>() : 0;
}

std::string yaml_of(const json::value& v) {
  YAML::Emitter out;
  emit(out, v);
  return std::string(out.c_str()) + "\n";
}

Result<bool> print_structured(const json::value& v, const std::string& output) {
  if (output == "json") {
    std::printf("%s\n", json::serialize(v).c_str());
    return true;
  }
  if (output == "yaml") {
    std::fputs(yaml_of(v).c_str(), stdout);
    return true;
  }
  return false;
}

void print_table(const std::vector<std::vector<std::string>>& rows) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    for (size_t i = 0; i < row.size(); ++i) {
      if (width.size() <= i) width.push_back(0);
      width[i] = std::max(width[i], row[i].size());
    }
  }
  for (const auto& row : rows) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 3, ' ');
    }
    std::printf("%s\n", line.c_str());
  }
}

std::string age_of(double t, double now) {
  if (t <= 0) return "-";
  const double s = std::max(0.0, now - t);
  if (s < 120) return fmt::format("{:.0f}s", s);
  if (s < 7200) return fmt::format("{:.0f}m", s / 60);
  if (s < 172800) return fmt::format("{:.0f}h", s / 3600);
  return fmt::format("{:.0f}d", s / 86400);
}

}  // namespace koi::cli
