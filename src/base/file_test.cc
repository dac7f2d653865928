#include "base/file.h"

#include <gtest/gtest.h>

namespace koi {
namespace {

TEST(FileTest, AtomicWriteThenMapAndRead) {
  auto dir = make_temp_dir("koi-file-test");
  ASSERT_TRUE(dir.ok());
  std::string p = path_join(*dir, "a.bin");
  ASSERT_TRUE(write_file_atomic(p, "hello").ok());
  ASSERT_TRUE(write_file_atomic(p, "hello world").ok());
  auto m = MappedFile::open(p);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(m->view(), "hello world");
  EXPECT_EQ(*read_file(p), "hello world");
  remove_all(*dir);
}

TEST(FileTest, MissingFileNamesThePath) {
  auto m = MappedFile::open("/nonexistent/koi/model.gguf");
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kNotFound);
  EXPECT_NE(m.status().message().find("/nonexistent/koi/model.gguf"), std::string::npos);
}

TEST(FileTest, PathJoin) {
  EXPECT_EQ(path_join("a/", "/b"), "a/b");
  EXPECT_EQ(path_join("a", "b"), "a/b");
}

}  // namespace
}  // namespace koi
