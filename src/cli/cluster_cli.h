// What `koi job`, `koi queue` and `koi node` share: the --server/--token/-o flags (with
// KOI_SERVER and KOI_TOKEN as fallbacks), the API client, and output as a table, JSON or
// YAML in kubectl's manner.
#pragma once

#include <CLI/CLI.hpp>

#include <boost/json/value.hpp>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "cluster/control_plane/api_client.h"

namespace koi::cli {

struct ClusterFlags {
  std::string server;
  std::string token;
  std::string output = "table";
  std::string ns;  // -n; default: the token's own namespace
};

// Declares --server, --token, -o and -n on `app`.
void add_cluster_flags(CLI::App* app, ClusterFlags* flags);
// The client for the flags (or the environment); an error says what is missing.
Result<cluster::ApiClient> cluster_client(const ClusterFlags& flags);
// The namespace to use: -n, else the token's own (GET /apis/v1/whoami).
Result<std::string> cluster_namespace(cluster::ApiClient& client, const ClusterFlags& flags);

// Opens the client and the namespace for the flags, or prints the error and sets *code (then
// false), for commands that work in one namespace.
bool cluster_connect(const ClusterFlags& flags, std::optional<cluster::ApiClient>* client, std::string* ns, int* code);

// The value at `path` in an object as text ("" when absent; numbers as %g) or as a number (0).
std::string json_text(const boost::json::value& v, std::initializer_list<const char*> path);
double json_number(const boost::json::value& v, std::initializer_list<const char*> path);

// Prints `v` as JSON or YAML when -o asks for it and returns true; false for "table".
Result<bool> print_structured(const boost::json::value& v, const std::string& output);
// Prints rows as aligned columns, the first row being the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
std::string yaml_of(const boost::json::value& v);
std::string age_of(double unix_seconds, double now);

}  // namespace koi::cli
