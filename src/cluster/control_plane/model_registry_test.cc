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
