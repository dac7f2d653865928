// The admin API as a plain function over a Fleet and a real SQLite store: partial updates,
// refusals that name the field and change nothing, and changes that survive a restart.
#include "gateway/admin_api.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "base/clock.h"
#include "base/file.h"

namespace koi::gateway {
namespace {

namespace json = boost::json;

constexpr const char* kKey = "admin-key-0123456789";

const char* kYaml = R"(
admin: {listen: 127.0.0.1:0, key: admin-key-0123456789}
models:
  - name: m
    versions:
      - {name: v1, weight: 100, replicas: ["http://127.0.0.1:9001"]}
      - {name: v2, weight: 0, replicas: ["http://127.0.0.1:9002"]}
  - name: n
    versions: [{name: v1, replicas: ["http://127.0.0.1:9003"]}]
tenants:
  - {name: acme, rpm: 60, tpm: 600, max_concurrency: 2, priority: high, models: [m]}
)";

// A tenant as /admin/state shows it; `exists` false for "no such tenant".
struct TenantView {
  bool exists = true;
  double rpm = 0, tpm = 0;
  int max_concurrency = 0;
  std::string priority = "normal";
  std::vector<std::string> models;
  bool operator==(const TenantView&) const = default;
};

std::ostream& operator<<(std::ostream& os, const TenantView& t) {
  if (!t.exists) return os << "(no tenant)";
  os << "{rpm " << t.rpm << ", tpm " << t.tpm << ", max_concurrency " << t.max_concurrency << ", " << t.priority << ", models [";
  for (const auto& m : t.models) os << m << " ";
  return os << "]}";
}

const TenantView kAcme{true, 60, 600, 2, "high", {"m"}};

class AdminApiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = *make_temp_dir("koi-admin");
    config_ = *parse_config(kYaml, "gw.yaml");
    restart();
  }
  void TearDown() override { remove_all(dir_); }
  // A fresh Fleet from the YAML plus what the store kept, as Gateway::start builds it.
  void restart() {
    api_.reset();
    fleet_.reset();
    store_.reset();
    store_ = std::move(open_store(path_join(dir_, "ledger.db")).value());
    fleet_ = std::make_unique<Fleet>(config_, clock_, 1);
    ASSERT_TRUE(restore_admin_changes(*store_, *fleet_).ok());
    api_ = std::make_unique<AdminApi>(kKey, *fleet_, *store_);
  }
  AdminReply call(const std::string& method_and_target, const std::string& body, std::string_view key = kKey) {
    const size_t space = method_and_target.find(' ');
    return api_->handle(method_and_target.substr(0, space), method_and_target.substr(space + 1), key, body);
  }
  json::object state() { return json::parse(fleet_->state_json()).as_object(); }
  TenantView tenant(const std::string& name) {
    const json::object all = state();
    const json::value* t = all.at("tenants").as_object().if_contains(name);
    if (!t) return TenantView{.exists = false};
    const json::object& o = t->as_object();
    TenantView v{true, o.at("rpm").to_number<double>(), o.at("tpm").to_number<double>(),
                 static_cast<int>(o.at("max_concurrency").to_number<int64_t>()), std::string(o.at("priority").as_string()), {}};
    for (const auto& m : o.at("models").as_array()) v.models.emplace_back(m.as_string());
    return v;
  }
  // "v1=100 v2=0" for a model's weights; each version's replica URLs follow in brackets.
  std::string versions(const std::string& model) {
    std::string out;
    const json::object all = state();
    for (const auto& v : all.at("models").as_object().at(model).as_object().at("versions").as_array()) {
      const json::object& o = v.as_object();
      out += (out.empty() ? "" : " ") + std::string(o.at("name").as_string()) + "=" +
             std::to_string(static_cast<int>(o.at("weight").to_number<double>())) + "[";
      for (const auto& r : o.at("replicas").as_array()) out += std::string(r.as_object().at("url").as_string()).substr(17);
      out += "]";
    }
    return out;
  }

  std::string dir_;
  GatewayConfig config_;
  FakeClock clock_;
  std::unique_ptr<UsageStore> store_;
  std::unique_ptr<Fleet> fleet_;
  std::unique_ptr<AdminApi> api_;
};

struct AdminCase {
  const char* call;
  const char* body;
  int status;
  const char* error;  // the whole error message of a refusal; "" for a 200
  const char* tenant;
  TenantView want;    // that tenant afterwards
};

std::string error_of(const AdminReply& r) {
  json::error_code ec;
  json::value v = json::parse(r.body, ec);
  if (ec || !v.is_object() || !v.as_object().contains("error")) return "";
  return std::string(v.as_object()["error"].as_object()["message"].as_string());
}

TEST_F(AdminApiTest, EveryCallAppliesExactlyWhatItSaysOrIsRefusedNamingTheField) {
  const AdminCase cases[] = {
      // Partial updates: only the fields given change.
      {"POST /admin/tenants", R"({"name":"acme","rpm":5})", 200, "", "acme", {true, 5, 600, 2, "high", {"m"}}},
      {"POST /admin/tenants", R"({"name":"acme","tpm":0})", 200, "", "acme", {true, 60, 0, 2, "high", {"m"}}},
      {"POST /admin/tenants", R"({"name":"acme","max_concurrency":7})", 200, "", "acme", {true, 60, 600, 7, "high", {"m"}}},
      {"POST /admin/tenants", R"({"name":"acme","priority":"low"})", 200, "", "acme", {true, 60, 600, 2, "low", {"m"}}},
      {"POST /admin/tenants", R"({"name":"acme","models":["m","n"]})", 200, "", "acme", {true, 60, 600, 2, "high", {"m", "n"}}},
      {"POST /admin/tenants", R"({"name":"acme","models":[]})", 200, "", "acme", {true, 60, 600, 2, "high", {}}},
      {"POST /admin/tenants", R"({"name":"acme"})", 200, "", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","rpm":2.5,"tpm":1e6,"max_concurrency":0,"priority":"normal"})", 200, "", "acme",
       {true, 2.5, 1e6, 0, "normal", {"m"}}},
      {"POST /admin/tenants", R"({"name":"acme","max_concurrency":3.0})", 200, "", "acme", {true, 60, 600, 3, "high", {"m"}}},
      // A new tenant starts from the documented defaults.
      {"POST /admin/tenants", R"({"name":"beta"})", 200, "", "beta", {true, 0, 0, 0, "normal", {}}},
      {"POST /admin/tenants", R"({"name":"beta","tpm":100,"models":["n"]})", 200, "", "beta", {true, 0, 100, 0, "normal", {"n"}}},
      // Wrong types, out-of-range values, unknown fields, missing pieces: refused, nothing changes.
      {"POST /admin/tenants", R"({"name":"acme","rpm":"abc"})", 400, R"(tenants.rpm must be a non-negative number, got "abc")",
       "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","rpm":-1})", 400, "tenants.rpm must be a non-negative number, got -1", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","rpm":null})", 400, "tenants.rpm must be a non-negative number, got null", "acme",
       kAcme},
      {"POST /admin/tenants", R"({"name":"acme","tpm":true})", 400, "tenants.tpm must be a non-negative number, got true", "acme",
       kAcme},
      {"POST /admin/tenants", R"({"name":"acme","rpm":5,"tpm":[1]})", 400, "tenants.tpm must be a non-negative number, got [1]",
       "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","max_concurrency":1.5})", 400,
       "tenants.max_concurrency must be an integer from 0 to 2147483647, got 1.5E0", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","max_concurrency":3000000000})", 400,
       "tenants.max_concurrency must be an integer from 0 to 2147483647, got 3000000000", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","max_concurrency":-2})", 400,
       "tenants.max_concurrency must be an integer from 0 to 2147483647, got -2", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","priority":"urgent"})", 400,
       R"(tenants.priority must be "high", "normal" or "low", got "urgent")", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","priority":1})", 400, R"(tenants.priority must be "high", "normal" or "low", got 1)",
       "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","models":"m"})", 400,
       R"(tenants.models must be a list of model names ([] for every model), got "m")", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","models":["m",3]})", 400, "tenants.models[1] must be a model name, got 3", "acme",
       kAcme},
      {"POST /admin/tenants", R"({"name":"acme","models":["nope"]})", 400,
       "tenants.models[0]: model 'nope' does not exist; GET /admin/state lists the models", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","rpmm":5})", 400, "tenants.rpmm: unknown key; did you mean rpm?", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme","limit":5})", 400,
       "tenants.limit: unknown key; the keys here are name, rpm, tpm, max_concurrency, priority, models", "acme", kAcme},
      {"POST /admin/tenants", R"({"rpm":5})", 400, "tenants.name is required (a non-empty string)", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":""})", 400, R"(tenants.name must be a non-empty string, got "")", "", {.exists = false}},
      {"POST /admin/tenants", R"({"name":7})", 400, "tenants.name must be a non-empty string, got 7", "7", {.exists = false}},
      {"POST /admin/tenants", R"([1])", 400, "tenants: the body must be a JSON object", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"acme",)", 400, "tenants: the body must be a JSON object", "acme", kAcme},
      {"POST /admin/tenants", R"({"name":"beta","rpm":"5"})", 400, R"(tenants.rpm must be a non-negative number, got "5")", "beta",
       {.exists = false}},
      // Keys: the tenant must exist.
      {"POST /admin/keys", R"({"tenant":"ghost"})", 404,
       "keys.tenant: tenant 'ghost' does not exist; create it with POST /admin/tenants", "ghost", {.exists = false}},
      {"POST /admin/keys", R"({"tenant":"acme","ttl":5})", 400, "keys.ttl: unknown key; the keys here are tenant", "acme", kAcme},
      {"POST /admin/keys", R"({})", 400, "keys.tenant is required (a non-empty string)", "acme", kAcme},
      {"DELETE /admin/keys/ffffffff", "", 404, "no key with id ffffffff", "acme", kAcme},
      // Weights and replicas.
      {"POST /admin/weights", R"({"model":"m","weights":{"v1":"x"}})", 400, R"(weights.weights.v1 must be a non-negative number, got "x")",
       "acme", kAcme},
      {"POST /admin/weights", R"({"model":"m","weights":{"v1":-5}})", 400, "weights.weights.v1 must be a non-negative number, got -5",
       "acme", kAcme},
      {"POST /admin/weights", R"({"model":"m","weights":{"v9":5}})", 404,
       "weights.weights.v9: no version m/v9; GET /admin/state lists the versions", "acme", kAcme},
      {"POST /admin/weights", R"({"model":"m","weights":{}})", 400, "weights.weights must be an object {\"VERSION\": weight, ...}, got {}",
       "acme", kAcme},
      {"POST /admin/weights", R"({"model":"m"})", 400, "weights.weights is required ({\"VERSION\": weight, ...})", "acme", kAcme},
      {"POST /admin/weights", R"({"model":"m","weight":{"v1":5}})", 400, "weights.weight: unknown key; did you mean weights?", "acme",
       kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:99999"})", 400,
       "replicas.url: replica URL 'http://127.0.0.1:99999' has port 99999; a port is 1-65535", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:0"})", 400,
       "replicas.url: replica URL 'http://127.0.0.1:0' has port 0; a port is 1-65535", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"https://127.0.0.1:8000"})", 400,
       "replicas.url: replica URL 'https://127.0.0.1:8000' must read http://HOST:PORT", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://:8000"})", 400,
       "replicas.url: replica URL 'http://:8000' must read http://HOST:PORT", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1"})", 400, "replicas.url is required (a non-empty string)", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9001"})", 409,
       "replica http://127.0.0.1:9001 is already in m/v1", "acme", kAcme},
      {"DELETE /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9009"})", 404,
       "replica http://127.0.0.1:9009 is not in m/v1", "acme", kAcme},
      {"POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9001","weight":1})", 400,
       "replicas.weight: unknown key; the keys here are model, version, url", "acme", kAcme},
      {"PUT /admin/tenants", R"({"name":"acme"})", 404, "admin API: no route PUT /admin/tenants; see docs/gateway.md for the admin calls",
       "acme", kAcme},
  };
  static_assert(std::size(cases) >= 40);
  for (const AdminCase& c : cases) {
    SCOPED_TRACE(std::string(c.call) + " " + c.body);
    TearDown();  // every case starts from the YAML alone, with an empty store
    SetUp();
    const AdminReply r = call(c.call, c.body);
    EXPECT_EQ(r.status, c.status) << r.body;
    EXPECT_EQ(error_of(r), c.error);
    EXPECT_EQ(tenant(c.tenant), c.want);
    if (r.status != 200) {
      EXPECT_EQ(versions("m"), "v1=100[9001] v2=0[9002]");  // a refused call changes nothing
      EXPECT_EQ(tenant("acme"), kAcme);
    }
  }
}

TEST_F(AdminApiTest, WrongOrMissingAdminKeyIsRefused) {
  EXPECT_EQ(call("GET /admin/state", "", "wrong-key-0123456789").status, 401);
  EXPECT_EQ(call("GET /admin/state", "", "").status, 401);
  EXPECT_EQ(call("GET /admin/state", "").status, 200);
}

TEST_F(AdminApiTest, WeightsAndReplicasApplyExactly) {
  EXPECT_EQ(call("POST /admin/weights", R"({"model":"m","weights":{"v2":30}})").status, 200);
  EXPECT_EQ(versions("m"), "v1=100[9001] v2=30[9002]");
  EXPECT_EQ(call("POST /admin/replicas", R"({"model":"m","version":"v3","url":"http://127.0.0.1:9004"})").status, 200);
  EXPECT_EQ(call("DELETE /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9001"})").status, 200);
  EXPECT_EQ(versions("m"), "v1=100[] v2=30[9002] v3=0[9004]");
}

TEST_F(AdminApiTest, AdminChangesSurviveARestart) {
  ASSERT_EQ(call("POST /admin/tenants", R"({"name":"acme","rpm":5,"models":["m","n"]})").status, 200);
  ASSERT_EQ(call("POST /admin/tenants", R"({"name":"beta","tpm":100})").status, 200);
  ASSERT_EQ(call("POST /admin/weights", R"({"model":"m","weights":{"v1":40,"v2":60}})").status, 200);
  ASSERT_EQ(call("POST /admin/replicas", R"({"model":"m","version":"v3","url":"http://127.0.0.1:9004"})").status, 200);
  ASSERT_EQ(call("DELETE /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9001"})").status, 200);
  const AdminReply key = call("POST /admin/keys", R"({"tenant":"beta"})");
  ASSERT_EQ(key.status, 200);
  const std::string secret(json::parse(key.body).as_object()["key"].as_string());
  restart();
  EXPECT_EQ(tenant("acme"), (TenantView{true, 5, 600, 2, "high", {"m", "n"}}));
  EXPECT_EQ(tenant("beta"), (TenantView{true, 0, 100, 0, "normal", {}}));
  EXPECT_EQ(versions("m"), "v1=40[] v2=60[9002] v3=0[9004]");
  ASSERT_TRUE(fleet_->authenticate(secret).has_value());
  EXPECT_EQ(fleet_->authenticate(secret)->tenant, "beta");
  // A replica added back after its removal is back after the next restart too.
  ASSERT_EQ(call("POST /admin/replicas", R"({"model":"m","version":"v1","url":"http://127.0.0.1:9001"})").status, 200);
  restart();
  EXPECT_EQ(versions("m"), "v1=40[9001] v2=60[9002] v3=0[9004]");
}

// What the control plane's Deployments rely on (docs/cluster.md): a route and versions the
// YAML file lacks are made by adding their first replica, start from the weights the calls
// give them, and are back after a restart.
TEST_F(AdminApiTest, ARouteTheFileLacksIsMadeAtRunTimeAndSurvivesARestart) {
  EXPECT_FALSE(fleet_->has_model("fortunes"));
  ASSERT_EQ(call("POST /admin/replicas", R"({"model":"fortunes","version":"v1","url":"http://127.0.0.1:9101"})").status, 200);
  EXPECT_EQ(versions("fortunes"), "v1=100[9101]");  // the route's first version takes the traffic
  ASSERT_EQ(call("POST /admin/replicas", R"({"model":"fortunes","version":"v2","url":"http://127.0.0.1:9102"})").status, 200);
  EXPECT_EQ(versions("fortunes"), "v1=100[9101] v2=0[9102]");  // a later one starts at 0
  ASSERT_EQ(call("POST /admin/weights", R"({"model":"fortunes","weights":{"v1":90,"v2":10}})").status, 200);
  EXPECT_EQ(call("POST /admin/replicas", R"({"model":"fortunes","version":"v2","url":"http://127.0.0.1:9102"})").status, 409);
  restart();
  EXPECT_EQ(versions("fortunes"), "v1=90[9101] v2=10[9102]");
  ASSERT_EQ(call("DELETE /admin/replicas", R"({"model":"fortunes","version":"v1","url":"http://127.0.0.1:9101"})").status, 200);
  EXPECT_EQ(call("DELETE /admin/replicas", R"({"model":"fortunes","version":"v1","url":"http://127.0.0.1:9101"})").status, 404);
  EXPECT_EQ(versions("fortunes"), "v1=90[] v2=10[9102]");
  // A version the file lacks that was left without replicas is not made again at a restart
  // (it has nothing to route to); the control plane says its weights afresh when it adds one.
  restart();
  EXPECT_EQ(versions("fortunes"), "v2=10[9102]");
  EXPECT_EQ(call("POST /admin/weights", R"({"model":"fortunes","weights":{"v1":0}})").status, 404);
}

}  // namespace
}  // namespace koi::gateway
