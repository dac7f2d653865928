#include "base/file.h"

#include <gtest/gtest.h>
#include <unistd.h>

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

TEST(FileTest, AtomicFileWriterStreamsAndRemovesAnUncommittedFile) {
  auto dir = make_temp_dir("koi-file-test");
  ASSERT_TRUE(dir.ok());
  std::string p = path_join(*dir, "big.bin");
  std::string big(3 << 20, 'x');  // larger than the writer's buffer
  {
    auto w = AtomicFileWriter::create(p);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append("ab").ok());
    ASSERT_TRUE(w->append(big).ok());
    ASSERT_TRUE(w->append_zeros(5000).ok());
    EXPECT_EQ(w->size(), 2 + big.size() + 5000);
    EXPECT_FALSE(file_exists(p));
    ASSERT_TRUE(w->commit().ok());
  }
  EXPECT_EQ(*read_file(p), "ab" + big + std::string(5000, '\0'));
  {
    auto w = AtomicFileWriter::create(path_join(*dir, "abandoned.bin"));
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE(w->append("partial").ok());
  }
  EXPECT_FALSE(file_exists(path_join(*dir, "abandoned.bin")));
  EXPECT_FALSE(file_exists(path_join(*dir, "abandoned.bin.tmp." + std::to_string(::getpid()))));
  remove_all(*dir);
}

TEST(FileTest, PathJoin) {
  EXPECT_EQ(path_join("a/", "/b"), "a/b");
  EXPECT_EQ(path_join("a", "b"), "a/b");
}

}  // namespace
}  // namespace koi
