#include "cluster/control_plane/api.h"

#include <fmt/format.h>

#include <boost/asio/as_tuple.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/beast/http.hpp>
#include <boost/json.hpp>

#include "cluster/control_plane/admission.h"
#include "cluster/control_plane/console.h"
#include "cluster/control_plane/job_metrics.h"
#include "cluster/control_plane/job_submit.h"
#include "net/sse.h"

namespace koi::cluster {
namespace json = boost::json;
namespace http = boost::beast::http;
namespace asio = boost::asio;

namespace {

constexpr auto kNoThrow = asio::as_tuple(asio::use_awaitable);
constexpr int64_t kLogChunk = 1 << 20;
constexpr auto kWatchKeepalive = std::chrono::seconds(10);
constexpr int64_t kDefaultSeriesPoints = 1000;
constexpr int64_t kMaxSeriesPoints = 100000;

std::vector<std::string> split_path(std::string_view path) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < path.size()) {
    size_t j = path.find('/', i);
    if (j == std::string_view::npos) j = path.size();
    if (j > i) out.emplace_back(path.substr(i, j - i));
    i = j + 1;
  }
  return out;
}

std::string percent_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size() && std::isxdigit(static_cast<unsigned char>(s[i + 1])) &&
        std::isxdigit(static_cast<unsigned char>(s[i + 2]))) {
      out += static_cast<char>(std::stoi(std::string(s.substr(i + 1, 2)), nullptr, 16));
      i += 2;
    } else {
      out += s[i] == '+' ? ' ' : s[i];
    }
  }
  return out;
}

std::map<std::string, std::string> query_of(const net::Request& req) {
  std::map<std::string, std::string> out;
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  if (q == std::string_view::npos) return out;
  std::string_view rest = target.substr(q + 1);
  while (!rest.empty()) {
    size_t amp = rest.find('&');
    std::string_view kv = rest.substr(0, amp);
    size_t eq = kv.find('=');
    out[percent_decode(kv.substr(0, eq))] = eq == std::string_view::npos ? "" : percent_decode(kv.substr(eq + 1));
    if (amp == std::string_view::npos) break;
    rest = rest.substr(amp + 1);
  }
  return out;
}

int64_t int_param(const std::map<std::string, std::string>& q, const std::string& k, int64_t fallback) {
  auto it = q.find(k);
  if (it == q.end() || it->second.empty()) return fallback;
  char* end = nullptr;
  const long long v = std::strtoll(it->second.c_str(), &end, 10);
  return end && *end == '\0' ? v : fallback;
}

}  // namespace

Reply error_reply(const Status& s) {
  const int code = http_status_of(s);
  const char* reason = code == 400 ? "Invalid" : code == 404 ? "NotFound" : code == 409 ? "Conflict"
                     : code == 401 ? "Unauthorized" : code == 403 ? "Forbidden" : "InternalError";
  return {code, status_json(code, reason, s.message())};
}

Reply json_reply(const json::value& v, int code) { return {code, json::serialize(v)}; }

namespace {

Reply error(const Status& s) { return error_reply(s); }
Reply ok_json(const json::value& v, int code = 200) { return json_reply(v, code); }

std::string not_found_job(const std::string& ns, const std::string& name) {
  return fmt::format("job {} not found in namespace {}", name, ns);
}

}  // namespace

std::string status_json(int code, std::string_view reason, std::string_view message) {
  return json::serialize(json::object{{"apiVersion", kApiVersion}, {"kind", "Status"}, {"status", "Failure"},
                                      {"code", code}, {"reason", reason}, {"message", message}});
}

int http_status_of(const Status& s) {
  switch (s.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists:
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

ApiServer::ApiServer(StateStore& store, Reconciler& reconciler, Executor& executor, metrics::Registry& registry,
                     std::vector<TokenEntry> tokens, std::string work_dir)
    : store_(store), reconciler_(reconciler), executor_(executor), registry_(registry), work_dir_(std::move(work_dir)) {
  for (TokenEntry& t : tokens) {
    tokens_[t.sha256_hex] = t.principal;
    if (!t.principal.admin) tenants_.push_back(t.principal.name);
  }
  registry_.counter("koi_cluster_api_requests_total", "API requests by HTTP status", {"code"});
}

std::optional<Principal> ApiServer::authenticate(const net::Request& req) const {
  auto it = req.find(http::field::authorization);
  if (it == req.end()) return std::nullopt;
  std::string_view v(it->value().data(), it->value().size());
  if (!v.starts_with("Bearer ")) return std::nullopt;
  auto p = tokens_.find(sha256_hex(v.substr(7)));
  if (p == tokens_.end()) return std::nullopt;
  return p->second;
}

net::Handler ApiServer::handler() {
  return [this](net::Request& req, net::Responder& res) -> asio::awaitable<void> { co_await handle(req, res); };
}

asio::awaitable<void> ApiServer::handle(net::Request& req, net::Responder& res) {
  const std::map<std::string, std::string> q = query_of(req);
  const std::vector<std::string> parts = split_path(net::request_path(req));
  const bool get = req.method() == http::verb::get;
  const bool follow_logs = get && parts.size() == 7 && parts[6] == "logs" && q.count("follow") && q.at("follow") == "1";
  const bool watch = get && parts.size() == 3 && parts[2] == "watch";
  if ((follow_logs || watch) && authenticate(req)) {
    if (follow_logs) co_await stream_logs(req, res);
    if (watch) co_await stream_watch(req, res);
    co_return;
  }
  Reply r = route(req);
  registry_.add("koi_cluster_api_requests_total", {{"code", std::to_string(r.status)}});
  co_await res.send(r.status, std::move(r.body), r.content_type);
}

void ApiServer::add_resource(const std::string& plural, ResourceHandler handler) {
  resources_[plural] = std::move(handler);
}

Reply ApiServer::route(const net::Request& req) {
  const std::string_view path = net::request_path(req);
  const http::verb method = req.method();
  if (method == http::verb::get && path == "/health") return {200, "ok\n", "text/plain"};
  if (method == http::verb::get && path == "/metrics") return {200, registry_.render(), "text/plain; version=0.0.4"};
  if (method == http::verb::get && (path == "/" || path == "/console" || path.starts_with("/console/"))) {
    return console_reply(path);
  }
  const std::vector<std::string> parts = split_path(path);
  if (parts.size() < 3 || parts[0] != "apis" || parts[1] != "v1") {
    return error(Status::not_found("no route " + std::string(path) + "; the API lives under /apis/v1"));
  }
  const std::optional<Principal> who = authenticate(req);
  if (!who) {
    return {401, status_json(401, "Unauthorized", "missing or unknown token: pass --token or set KOI_TOKEN "
                                                  "(Authorization: Bearer TOKEN)")};
  }
  if (parts.size() >= 5 && parts[2] == "namespaces") {
    const std::string& ns = parts[3];
    if (!who->admin && who->name != ns) {
      // Another tenant's namespace looks exactly like one that does not exist.
      if (parts.size() >= 6) {
        const std::string kind = parts[4].ends_with("s") ? parts[4].substr(0, parts[4].size() - 1) : parts[4];
        return error(Status::not_found(fmt::format("{} {} not found in namespace {}", kind, parts[5], ns)));
      }
      return error(Status::not_found("namespace " + ns + " not found"));
    }
    if (parts[4] == "jobs") return route_jobs(*who, req, parts);
    return route_resource(*who, req, parts);
  }
  if (parts.size() == 3 && resources_.count(parts[2])) return route_resource(*who, req, parts);
  return route_cluster(*who, req, parts);
}

Reply ApiServer::route_resource(const Principal& who, const net::Request& req, const std::vector<std::string>& parts) {
  const bool every_namespace = parts.size() == 3;
  const std::string& plural = every_namespace ? parts[2] : parts[4];
  auto it = resources_.find(plural);
  if (it == resources_.end()) return error(Status::not_found("no route " + std::string(net::request_path(req))));
  if (every_namespace && (!who.admin || req.method() != http::verb::get)) {
    return error(Status::not_found(fmt::format("listing every namespace needs an admin token; use /apis/v1/namespaces/{}/{}",
                                               who.name, plural)));
  }
  ResourceRequest r;
  r.who = who;
  r.ns = every_namespace ? "" : parts[3];
  if (!every_namespace) r.path.assign(parts.begin() + 5, parts.end());
  r.method = req.method();
  r.body = req.body();
  r.query = query_of(req);
  return it->second(r);
}

Reply ApiServer::route_cluster(const Principal& who, const net::Request& req, const std::vector<std::string>& parts) {
  const http::verb method = req.method();
  const bool get = method == http::verb::get;
  if (get && parts.size() == 3 && parts[2] == "whoami") {
    return ok_json(json::object{{"name", who.name}, {"admin", who.admin}, {"namespace", who.admin ? "" : who.name}});
  }
  if (parts.size() == 3 && parts[2] == "admission") return admission_route(who, method, req.body(), store_, reconciler_);
  if (method == http::verb::put && parts.size() == 4 && parts[2] == "queues") {
    if (!who.admin) {
      return {403, status_json(403, "Forbidden", "queues are managed by admins: ask one to change queue " + parts[3])};
    }
    auto q = parse_queue_manifest(req.body(), parts[3], tenants_);
    if (!q.ok()) return error(q.status());
    for (const QueueSpec& old : reconciler_.cluster()->queues) {
      if (old.name == q->name && old.tenant != q->tenant) {
        // Moving it would hand one tenant's jobs to another.
        return error(Status::invalid_argument("spec.tenant: queue " + q->name + " belongs to " + old.tenant +
                                              "; a queue cannot change tenants (make a new one)"));
      }
    }
    Event e;
    e.kind = "Queue", e.ns = q->tenant, e.name = q->name, e.time = wall_seconds(), e.reason = "QueueUpdated";
    e.message = "queue " + q->name + " set by " + who.name;
    if (Status s = store_.put_queue(*q, e); !s.ok()) return error(s);
    reconciler_.set_queue(*q);
    return ok_json(queue_object_json(*q));
  }
  if (get && parts.size() == 3 && parts[2] == "queues") {
    json::array items;
    for (const QueueUsage& u : reconciler_.queue_usage()) {
      if (!who.admin && u.tenant != who.name) continue;
      const QueueSpec* spec = nullptr;
      for (const QueueSpec& s : reconciler_.cluster()->queues) {
        if (s.name == u.name) spec = &s;
      }
      if (!spec) continue;
      json::value obj = queue_object_json(*spec);
      json::object used{{"cpu", static_cast<double>(u.used.at("cpu")) / 1000.0},
                        {"memory", static_cast<double>(u.used.at("memory"))},
                        {"gpu", static_cast<double>(u.used.at("gpu")) / 1000.0}};
      obj.as_object()["status"] = json::object{{"pendingJobs", u.pending}, {"runningJobs", u.running},
                                               {"used", std::move(used)}, {"borrowing", u.borrowing}};
      items.push_back(std::move(obj));
    }
    return ok_json(json::object{{"apiVersion", kApiVersion}, {"kind", "QueueList"}, {"items", std::move(items)}});
  }
  if (get && parts.size() == 3 && parts[2] == "nodes") {
    json::array items;
    const std::vector<NodeFree> free = reconciler_.node_free();
    const std::vector<NodeSpec> nodes = executor_.inventory();
    const std::map<std::string, std::vector<NodeUsage>> usage = executor_.usage(kNodeUsageHistory);
    for (size_t i = 0; i < nodes.size(); ++i) {
      json::value obj = node_object_json(nodes[i]);
      json::object& status = obj.as_object()["status"].emplace_object();
      if (auto u = usage.find(nodes[i].name); u != usage.end() && !u->second.empty()) {
        status["usage"] = node_usage_json(u->second);
      }
      if (i < free.size()) {
        const NodeFree cap = reconciler_.cluster()->capacity(static_cast<int>(i));
        json::array gpus;
        for (int g = 0; g < nodes[i].gpu_count; ++g) {
          if (free[i].gpu[g] < cap.gpu[g]) gpus.push_back(g);
        }
        status["allocated"] = json::object{{"cpu", static_cast<double>(cap.cpu_milli - free[i].cpu_milli) / 1000.0},
                                           {"memoryMiB", cap.memory_mib - free[i].memory_mib},
                                           {"gpus", std::move(gpus)}};
      }
      items.push_back(std::move(obj));
    }
    return ok_json(json::object{{"apiVersion", kApiVersion}, {"kind", "NodeList"}, {"items", std::move(items)}});
  }
  if (get && parts.size() == 3 && parts[2] == "jobs") {
    if (!who.admin) return error(Status::not_found("listing every namespace needs an admin token; use /apis/v1/namespaces/" + who.name + "/jobs"));
    auto jobs = store_.list_jobs("", false);
    if (!jobs.ok()) return error(jobs.status());
    json::array items;
    for (const JobObject& j : *jobs) items.push_back(to_json(j));
    auto rv = store_.current_version();
    return ok_json(json::object{{"apiVersion", kApiVersion},
                                {"kind", "JobList"},
                                {"metadata", json::object{{"resourceVersion", std::to_string(rv.ok() ? *rv : 0)}}},
                                {"items", std::move(items)}});
  }
  return error(Status::not_found("no route " + std::string(net::request_path(req))));
}

Reply ApiServer::route_jobs(const Principal& who, const net::Request& req, const std::vector<std::string>& parts) {
  const std::string_view path = net::request_path(req);
  const http::verb method = req.method();
  const bool get = method == http::verb::get;
  const std::map<std::string, std::string> q = query_of(req);
  if (parts.size() > 7) return error(Status::not_found("no route " + std::string(path)));
  const std::string& ns = parts[3];
  if (parts.size() == 5) {
    if (get) {
      auto jobs = store_.list_jobs(ns, false);
      if (!jobs.ok()) return error(jobs.status());
      json::array items;
      for (const JobObject& j : *jobs) items.push_back(to_json(j));
      auto rv = store_.current_version();
      return ok_json(json::object{{"apiVersion", kApiVersion},
                                  {"kind", "JobList"},
                                  {"metadata", json::object{{"resourceVersion", std::to_string(rv.ok() ? *rv : 0)}}},
                                  {"items", std::move(items)}});
    }
    if (method != http::verb::post) return error(Status::not_found("jobs: use GET or POST"));
    return submit(who, ns, req.body());
  }
  const std::string& name = parts[5];
  auto found = store_.get_job(ns, name);
  if (!found.ok()) return error(found.status());
  if (!*found) return error(Status::not_found(not_found_job(ns, name)));
  JobObject& job = **found;
  if (parts.size() == 6 && get) return ok_json(to_json(job));
  if (parts.size() == 6 && method == http::verb::delete_) {
    const int64_t expected = int_param(q, "resourceVersion", 0);
    if (expected != 0 && expected != job.metadata.resource_version) {
      return error(Status::failed_precondition(fmt::format(
          "conflict: job {} is at resourceVersion {}, the request names {}; read it again and retry", name,
          job.metadata.resource_version, expected)));
    }
    if (is_terminal(job.status.phase) || !job.metadata.deletion_timestamp.empty()) return ok_json(to_json(job));
    if (Status s = cancel_job(store_, &job, who.name); !s.ok()) return error(s);
    reconciler_.wake();
    return ok_json(to_json(job), 202);
  }
  if (parts.size() == 7 && get && parts[6] == "events") {
    auto events = store_.events("Job", ns, name);
    if (!events.ok()) return error(events.status());
    json::array items;
    for (const Event& e : *events) items.push_back(json::parse(event_json(e)));
    return ok_json(json::object{{"apiVersion", kApiVersion}, {"kind", "EventList"}, {"items", std::move(items)}});
  }
  if (parts.size() == 7 && get && parts[6] == "metrics") return job_metrics_reply(job, q);
  if (parts.size() == 7 && get && parts[6] == "logs") {
    const int attempt = static_cast<int>(int_param(q, "attempt", job.status.attempts));
    const int replica = static_cast<int>(int_param(q, "replica", 0));
    if (attempt < 1 || attempt > job.status.attempts) {
      return error(Status::invalid_argument(job.status.attempts == 0 ? "job " + name + " has not started yet; no logs"
                                                                     : fmt::format("attempt: must be 1..{}", job.status.attempts)));
    }
    if (replica < 0 || replica >= job.spec.replicas) {
      return error(Status::invalid_argument(fmt::format("replica: must be 0..{}", job.spec.replicas - 1)));
    }
    auto text = executor_.logs(ReplicaHandle{"", replica_dir(work_dir_, ns, name, attempt, replica)}, 0, 64 << 20);
    if (!text.ok()) return error(text.status());
    return {200, std::move(*text), "text/plain"};
  }
  return error(Status::not_found("no route " + std::string(path)));
}

// What the job reports so far: its latest numbers and, for a trainer, each metric's series.
Reply ApiServer::job_metrics_reply(const JobObject& job, const std::map<std::string, std::string>& q) {
  const int64_t max_points = int_param(q, "maxPoints", kDefaultSeriesPoints);
  if (max_points < 2 || max_points > kMaxSeriesPoints) {
    return error(Status::invalid_argument(fmt::format("maxPoints: must be an integer 2..{}", kMaxSeriesPoints)));
  }
  auto latest = job_metrics(job, work_dir_, executor_);
  if (!latest.ok()) return error(latest.status());
  auto series = job_metric_series(job, work_dir_, static_cast<size_t>(max_points));
  if (!series.ok()) return error(series.status());
  return ok_json(json::object{
      {"apiVersion", kApiVersion},
      {"kind", "JobMetrics"},
      {"metadata", json::object{{"name", job.metadata.name}, {"namespace", job.metadata.ns}}},
      {"latest", std::move(*latest)},
      {"series", std::move(*series)}});
}

Reply ApiServer::submit(const Principal& who, const std::string& ns, const std::string& body) {
  auto job = parse_job_manifest(body, ns);
  if (!job.ok()) return error(job.status());
  const std::shared_ptr<const Cluster> cluster = reconciler_.cluster();
  if (Status s = submit_job(store_, *cluster, &*job, who.name); !s.ok()) return error(s);
  reconciler_.wake();
  return ok_json(to_json(*job), 201);
}

// Streams a replica's log as it grows until the attempt has ended and everything is sent.
asio::awaitable<void> ApiServer::stream_logs(net::Request& req, net::Responder& res) {
  Reply check = route(req);  // the same auth, namespace and bounds checks, and the log so far
  if (check.status != 200) {
    co_await res.send(check.status, std::move(check.body), check.content_type);
    co_return;
  }
  const std::vector<std::string> parts = split_path(net::request_path(req));
  const std::map<std::string, std::string> q = query_of(req);
  auto job = store_.get_job(parts[3], parts[5]);
  if (!job.ok() || !*job) co_return;
  const int attempt = static_cast<int>(int_param(q, "attempt", (*job)->status.attempts));
  const ReplicaHandle handle{"", replica_dir(work_dir_, parts[3], parts[5], attempt, static_cast<int>(int_param(q, "replica", 0)))};
  if (!co_await res.begin_stream(200, "text/plain")) co_return;
  int64_t offset = 0;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  for (;;) {
    auto current = store_.get_job(parts[3], parts[5]);
    const bool done = !current.ok() || !*current || (*current)->status.attempts != attempt ||
                      (*current)->status.phase != JobPhase::kRunning;
    for (;;) {
      auto chunk = executor_.logs(handle, offset, kLogChunk);
      if (!chunk.ok() || chunk->empty()) break;
      offset += static_cast<int64_t>(chunk->size());
      if (!co_await res.write(*chunk)) co_return;
    }
    if (done) break;
    timer.expires_after(std::chrono::milliseconds(200));
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (ec) co_return;
  }
  co_await res.end_stream();
}

asio::awaitable<void> ApiServer::stream_watch(net::Request& req, net::Responder& res) {
  const std::optional<Principal> who = authenticate(req);
  const std::map<std::string, std::string> q = query_of(req);
  int64_t after = int_param(q, "resourceVersion", 0);
  const double timeout = static_cast<double>(int_param(q, "timeoutSeconds", 0));
  const std::string ns = who->admin ? (q.count("namespace") ? q.at("namespace") : "") : who->name;
  if (!co_await res.begin_stream(200, "text/event-stream")) co_return;
  asio::steady_timer timer(co_await asio::this_coro::executor);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout);
  auto last_write = std::chrono::steady_clock::now();
  for (;;) {
    auto changes = store_.changes(after, ns, 500);
    if (!changes.ok()) break;
    for (const Change& c : *changes) {
      after = c.resource_version;
      std::string frame = fmt::format("id: {}\nevent: {}\n", c.resource_version, c.type) + net::sse_data(c.body);
      if (!co_await res.write(frame)) co_return;
      last_write = std::chrono::steady_clock::now();
    }
    // A comment line now and then: a client that left is noticed even when nothing changes.
    if (std::chrono::steady_clock::now() - last_write > kWatchKeepalive) {
      if (!co_await res.write(": keepalive\n\n")) co_return;
      last_write = std::chrono::steady_clock::now();
    }
    if (timeout > 0 && std::chrono::steady_clock::now() >= deadline) break;
    if (changes->size() == 500) continue;
    timer.expires_after(std::chrono::milliseconds(200));
    auto [ec] = co_await timer.async_wait(kNoThrow);
    if (ec) co_return;
  }
  co_await res.end_stream();
}

}  // namespace koi::cluster
