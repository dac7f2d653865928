// What `koi job`, `koi queue` and `koi node` share: the --server/--token/-o flags (with
// KOI_SERVER and KOI_TOKEN as fallbacks), the API client, and output as a table, JSON or
// YAML in kubectl's manner.
#pragma once

#include <CLI/CLI.hpp>

#include <boost/json/value.hpp>
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

// Prints `v` as JSON or YAML when -o asks for it and returns true; false for "table".
Result<bool> print_structured(const boost::json::value& v, const std::string& output);
// Prints rows as aligned columns, the first row being the header.
void print_table(const std::vector<std::vector<std::string>>& rows);
std::string yaml_of(const boost::json::value& v);
std::string age_of(double unix_seconds, double now);

}  // namespace koi::cli
