#include "cluster/control_plane/model_registry.h"

#include <gtest/gtest.h>

#include <boost/json.hpp>

#include "base/file.h"

namespace koi::cluster {
namespace {

TEST(ModelRef, ParsesAliasesVersionsAndLatest) {
  EXPECT_EQ(parse_model_ref("fortunes@production", "spec.model")->alias, "production");
  EXPECT_EQ(parse_model_ref("fortunes@3", "spec.model")->version, 3);
  EXPECT_EQ(parse_model_ref("fortunes@v12", "spec.model")->version, 12);
  auto latest = parse_model_ref("fortunes@latest", "spec.model");
  EXPECT_TRUE(latest->alias.empty() && latest->version == 0);
  EXPECT_EQ(parse_model_ref("fortunes", "spec.model")->model, "fortunes");
  auto bad = parse_model_ref("Fortunes@x", "spec.model");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("spec.model"), std::string::npos);
  EXPECT_FALSE(parse_model_ref("fortunes@", "spec.model").ok());
  EXPECT_FALSE(parse_model_ref("fortunes@v0", "spec.model").ok());
}

TEST(ModelRef, ResolvesThroughTheStore) {
  const std::string dir = *make_temp_dir("koi-model-ref");
  auto store = StateStore::open("sqlite:" + dir + "/cp.db");
  ASSERT_TRUE(store.ok());
  StoredObject model;
  model.kind = "Model";
  model.metadata.name = "fortunes", model.metadata.ns = "alpha";
  model.body["status"] = boost::json::object{{"latestVersion", 2}, {"aliases", boost::json::object{{"production", 1}}}};
  ASSERT_TRUE((*store)->create(&model, {}).ok());
  for (int v = 1; v <= 2; ++v) {
    ModelVersion mv;
    mv.model = "fortunes", mv.version = v;
    mv.artifact = {"/models/f" + std::to_string(v) + ".gguf", "gguf", 100 * v, "ab"};
    StoredObject o;
    o.kind = "ModelVersion";
    o.metadata.name = model_version_name("fortunes", v), o.metadata.ns = "alpha";
    o.body["spec"] = model_version_spec_json(mv);
    ASSERT_TRUE((*store)->create(&o, {}).ok());
  }
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("fortunes@production", ""))->artifact.path, "/models/f1.gguf");
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("fortunes", ""))->version, 2);
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("fortunes@2", ""))->artifact.size_bytes, 200);
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("fortunes@canary", "")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("fortunes@7", "")).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(resolve_model_ref(**store, "beta", *parse_model_ref("fortunes", "")).status().code(), StatusCode::kNotFound);
  store->reset();
  remove_all(dir);
}

}  // namespace
}  // namespace koi::cluster

#include <fstream>

#include "cluster/control_plane/config.h"
#include "cluster/control_plane/model_register.h"

namespace koi::cluster {
namespace {

TEST(ModelRegister, ParsesTimes) {
  EXPECT_DOUBLE_EQ(*parse_time("2026-12-01T18:30:00Z", "at"), 1796149800.0);
  EXPECT_DOUBLE_EQ(*parse_time("2026-12-01T18:30:00.25Z", "at"), 1796149800.25);
  EXPECT_DOUBLE_EQ(*parse_time("1796149800.5", "at"), 1796149800.5);
  EXPECT_EQ(parse_time("yesterday", "at").status().message(),
            "at: 'yesterday' is not a time; use RFC 3339 (2026-12-01T18:30:00Z, fractions allowed) or unix seconds");
  EXPECT_FALSE(parse_time("2026-12-01T18:30:00", "at").ok());  // no zone
  EXPECT_FALSE(parse_time("-5", "at").ok());
}

TEST(ModelRegister, AliasHistoryAnswersWhichVersionHeldWhen) {
  boost::json::object status{{"aliasHistory", boost::json::array{
      boost::json::object{{"alias", "production"}, {"version", 1}, {"timestamp", 100.0}},
      boost::json::object{{"alias", "canary"}, {"version", 2}, {"timestamp", 150.0}},
      boost::json::object{{"alias", "production"}, {"version", 2}, {"timestamp", 200.0}},
      boost::json::object{{"alias", "production"}, {"version", 1}, {"timestamp", 300.0}}}}};
  EXPECT_EQ(alias_version_at(status, "production", 99), 0);
  EXPECT_EQ(alias_version_at(status, "production", 100), 1);
  EXPECT_EQ(alias_version_at(status, "production", 199.9), 1);
  EXPECT_EQ(alias_version_at(status, "production", 250), 2);
  EXPECT_EQ(alias_version_at(status, "production", 1e12), 1);  // rolled back
  EXPECT_EQ(alias_version_at(status, "canary", 160), 2);
  EXPECT_EQ(alias_version_at(status, "shadow", 160), 0);
}

TEST(ModelRegister, HashesArtifactsAndChecksTheirFormat) {
  const std::string dir = *make_temp_dir("koi-artifact");
  {
    std::ofstream(dir + "/m.gguf") << "GGUF" << std::string(100, 'x');
    std::ofstream(dir + "/abc.bin") << "abc";
  }
  auto gguf = read_artifact(dir + "/m.gguf", "");
  ASSERT_TRUE(gguf.ok()) << gguf.status().message();
  EXPECT_EQ(gguf->format, "gguf");
  EXPECT_EQ(gguf->size_bytes, 104);
  EXPECT_EQ(gguf->sha256, sha256_hex("GGUF" + std::string(100, 'x')));  // the file's bytes alone
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");  // FIPS 180-2
  auto abc = read_artifact(dir + "/abc.bin", "gguf");
  EXPECT_EQ(abc.status().message(), "format: " + dir + "/abc.bin is not gguf (unrecognised content)");
  EXPECT_EQ(read_artifact(dir + "/abc.bin", "").status().code(), StatusCode::kInvalidArgument);
  ASSERT_EQ(system(("mkdir -p " + dir + "/hf/sub && printf abc > " + dir + "/hf/config.json && printf d > " + dir +
                    "/hf/sub/w").c_str()), 0);
  auto hf = read_artifact(dir + "/hf", "");
  ASSERT_TRUE(hf.ok()) << hf.status().message();
  EXPECT_EQ(hf->format, "hf");
  EXPECT_EQ(hf->size_bytes, 4);
  // Every file in path order as PATH NUL BYTES.
  EXPECT_EQ(hf->sha256, sha256_hex(std::string("config.json\0abc", 15) + std::string("sub/w\0d", 7)));
  auto again = read_artifact(dir + "/hf", "hf");
  EXPECT_EQ(again->sha256, hf->sha256);
  EXPECT_EQ(read_artifact(dir + "/nope", "").status().message(), "artifact: " + dir + "/nope does not exist");
  remove_all(dir);
}

TEST(ModelRegister, ParsesRegisterRequests) {
  auto r = parse_register_request(R"({"fromJob": "train", "artifact": "/m.gguf", "metrics": {"perplexity": 3.5}})");
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->from_job, "train");
  EXPECT_EQ(r->metrics.at("perplexity").as_double(), 3.5);
  EXPECT_EQ(parse_register_request("{}").status().message(), "fromJob: is required (the job whose checkpoint or export this is)");
  EXPECT_EQ(parse_register_request(R"({"fromJob": "t", "artifact": "m.gguf"})").status().message(),
            "artifact: must be an absolute path");
  EXPECT_EQ(parse_register_request(R"({"fromJob": "t", "format": "onnx"})").status().message(),
            "format: must be gguf, hf or koi (got 'onnx')");
  EXPECT_EQ(parse_register_request(R"({"fromJob": "t", "metrics": {"ppl": "low"}})").status().message(),
            "metrics.ppl: must be a number");
  EXPECT_EQ(parse_register_request(R"({"fromJob": "t", "from": "x"})").status().message(), "from: unknown field");
}

}  // namespace
}  // namespace koi::cluster

#include "cluster/control_plane/local_executor.h"
#include "cluster/control_plane/reconciler.h"

namespace koi::cluster {
namespace {

JobObject finished_job(const std::string& name, JobKind kind, const std::string& checkpoint_dir) {
  JobObject j;
  j.metadata.ns = "alpha", j.metadata.name = name;
  j.spec.kind = kind;
  j.spec.command = {"true"};
  j.spec.checkpoint_dir = checkpoint_dir;
  j.status.phase = JobPhase::kSucceeded;
  j.status.attempts = 1;
  return j;
}

TEST(ModelRegister, RegistersVersionsAndMovesAliasesThroughTheStore) {
  const std::string dir = *make_temp_dir("koi-model-register");
  auto store = StateStore::open("sqlite:" + dir + "/cp.db");
  ASSERT_TRUE(store.ok());
  LocalExecutor executor("/bin/koi", {});
  ModelRegistry registry(**store, executor, dir + "/work");
  ASSERT_EQ(system(("mkdir -p " + dir + "/run/ckpt-00000010 " + dir + "/run/ckpt-00000020 && touch " + dir +
                    "/run/ckpt-00000010/COMPLETE && printf w > " + dir + "/run/ckpt-00000010/model.safetensors")
                       .c_str()), 0);  // ckpt-20 is incomplete: no marker
  JobObject train = finished_job("train", JobKind::kCommand, dir + "/run");
  JobObject eval = finished_job("eval", JobKind::kEval, "");
  JobObject running = finished_job("running", JobKind::kCommand, "");
  running.status.phase = JobPhase::kRunning;
  for (JobObject* j : {&train, &eval, &running}) ASSERT_TRUE((*store)->create_job(j, {}).ok());
  const std::string eval_dir = replica_dir(dir + "/work", "alpha", "eval", 1, 0);
  ASSERT_EQ(system(("mkdir -p " + eval_dir + " && printf 'loading\\ntokens 10 | loss 2 | perplexity 7.5\\n' > " + eval_dir +
                    "/log").c_str()), 0);

  RegisterRequest req;
  req.from_job = "train";
  req.eval_job = "eval";
  auto v1 = registry.register_version("alpha", "m", req, "alpha", 100);
  ASSERT_TRUE(v1.ok()) << v1.status().message();
  auto s1 = model_version_from_spec(v1->body.at("spec").as_object());
  EXPECT_EQ(s1->version, 1);
  EXPECT_EQ(s1->artifact.format, "koi");
  EXPECT_EQ(s1->artifact.path, dir + "/run/ckpt-00000010");
  EXPECT_EQ(s1->lineage.at("step").as_int64(), 10);
  EXPECT_EQ(s1->metrics.at("perplexity").as_double(), 7.5);
  {
    std::ofstream(dir + "/m.gguf") << "GGUF....";
  }
  req.artifact = dir + "/m.gguf";
  auto v2 = registry.register_version("alpha", "m", req, "alpha", 101);
  ASSERT_TRUE(v2.ok()) << v2.status().message();
  EXPECT_EQ(v2->metadata.name, "m-v2");
  req.from_job = "running";
  EXPECT_EQ(registry.register_version("alpha", "m", req, "alpha", 102).status().message(),
            "fromJob: job running is Running; a version is registered from a job that has Succeeded");

  auto m = registry.move_alias("alpha", "m", "production", 1, 0, "alpha", 200);
  ASSERT_TRUE(m.ok()) << m.status().message();
  const int64_t rv = m->metadata.resource_version;
  auto moved = registry.move_alias("alpha", "m", "production", 2, rv, "bob", 300);
  ASSERT_TRUE(moved.ok()) << moved.status().message();
  auto stale = registry.move_alias("alpha", "m", "production", 1, rv, "carol", 400);
  EXPECT_EQ(stale.status().code(), StatusCode::kFailedPrecondition);  // rv was read before bob's move
  const boost::json::object& status = moved->body.at("status").as_object();
  EXPECT_EQ(status.at("latestVersion").as_int64(), 2);
  EXPECT_EQ(status.at("aliasHistory").as_array().size(), 2u);
  EXPECT_EQ(alias_version_at(status, "production", 250), 1);
  EXPECT_EQ(alias_version_at(status, "production", 300), 2);
  // The reference syntax deployments use reads what the registry wrote.
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("m@production", ""))->artifact.path, dir + "/m.gguf");
  EXPECT_EQ(resolve_model_ref(**store, "alpha", *parse_model_ref("m", ""))->version, 2);
  store->reset();
  remove_all(dir);
}

}  // namespace
}  // namespace koi::cluster
