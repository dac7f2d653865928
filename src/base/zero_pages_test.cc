#include "base/zero_pages.h"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

namespace koi {
namespace {

// Pages of [p, p + bytes) resident in memory now (mincore).
size_t resident_pages(const void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  std::vector<unsigned char> in_core((bytes + page - 1) / page);
  EXPECT_EQ(0, mincore(const_cast<void*>(p), bytes, in_core.data()));
  size_t n = 0;
  for (unsigned char c : in_core) n += c & 1;
  return n;
}

TEST(ZeroPagesTest, ReadsZerosAndCommitsOnlyWrittenPages) {
  constexpr size_t kBytes = size_t{256} << 20;  // 256 MiB: committed up front, this would show
  ZeroPages pages(kBytes);
  ASSERT_NE(pages.data(), nullptr);
  EXPECT_EQ(pages.size(), kBytes);
  EXPECT_EQ(resident_pages(pages.data(), kBytes), 0u);
  auto* bytes = static_cast<uint8_t*>(pages.data());
  bytes[0] = 7;
  bytes[kBytes - 1] = 9;
  // Two pages written (a transparent huge page may commit up to 2 MiB around each).
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
  EXPECT_LE(resident_pages(pages.data(), kBytes) * page, size_t{4} << 20);
  EXPECT_EQ(bytes[1], 0);
  EXPECT_EQ(bytes[kBytes / 2], 0);
  EXPECT_EQ(bytes[kBytes - 1], 9);
}

TEST(ZeroPagesTest, MovesOwnership) {
  ZeroPages a(4096);
  static_cast<uint8_t*>(a.data())[10] = 1;
  void* p = a.data();
  ZeroPages b(std::move(a));
  EXPECT_EQ(a.data(), nullptr);
  EXPECT_EQ(a.size(), 0u);
  EXPECT_EQ(b.data(), p);
  ZeroPages c;
  c = std::move(b);
  EXPECT_EQ(c.data(), p);
  EXPECT_EQ(static_cast<uint8_t*>(c.data())[10], 1);
  EXPECT_EQ(ZeroPages(0).data(), nullptr);
}

}  // namespace
}  // namespace koi
