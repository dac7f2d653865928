// LoraPool at toy scale: registration, ids, LRU eviction under --max-loras and the memory
// budget, adapters in use never evicted, unload while in use.
#include "engine/lora_pool.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "model/lora_testing.h"
#include "model/random_model.h"

namespace koi::engine {
namespace {

class LoraPoolTest : public ::testing::Test {
 protected:
  void SetUp() override {
    config_ = *model::named_shape("tiny");
    root_ = *make_temp_dir("koi-lora-pool");
    for (int i = 0; i < 3; ++i) {
      dirs_.push_back(path_join(root_, "a" + std::to_string(i)));
      std::filesystem::create_directories(dirs_.back());
      model::PeftAdapter p;
      p.fill(config_, static_cast<uint64_t>(i));
      ASSERT_TRUE(p.write(dirs_.back()).ok());
    }
    bytes_ = model::LoraAdapter::load(dirs_[0], config_)->bytes();
  }
  void TearDown() override { remove_all(root_); }
  std::vector<bool> resident(const LoraPool& pool) {
    std::vector<bool> out;
    for (const LoraInfo& info : pool.list()) out.push_back(info.resident);
    return out;
  }

  model::ModelConfig config_;
  std::string root_;
  std::vector<std::string> dirs_;
  int64_t bytes_ = 0;
};

TEST_F(LoraPoolTest, AddsAcquiresAndRemoves) {
  LoraPool pool(config_, {});
  ASSERT_TRUE(pool.add("x", dirs_[0]).ok());
  EXPECT_EQ(pool.add("x", dirs_[1]).message(), "LoRA adapter 'x' is already loaded; unload it first");
  auto x = pool.acquire("x");
  ASSERT_TRUE(x.ok());
  EXPECT_EQ(x->id, 1u);
  EXPECT_EQ(x->adapter->rank(), 4);
  EXPECT_EQ(pool.acquire("y").status().code(), StatusCode::kNotFound);
  ASSERT_TRUE(pool.remove("x").ok());
  EXPECT_FALSE(pool.contains("x"));
  EXPECT_EQ(x->adapter->matrices(0, model::LoraTarget::kQ).rank, 4);  // still usable by its holder
  EXPECT_EQ(pool.remove("x").message(), "LoRA adapter 'x' is not loaded");
  ASSERT_TRUE(pool.add("x", dirs_[0]).ok());
  EXPECT_EQ(pool.acquire("x")->id, 2u);  // a new registration never shares the old one's cache key
  EXPECT_EQ(pool.stats().loads, 2);
}

TEST_F(LoraPoolTest, EvictsLeastRecentlyUsedUnderMaxLoras) {
  LoraPool pool(config_, {.max_loras = 2});
  ASSERT_TRUE(pool.add("a", dirs_[0]).ok());
  ASSERT_TRUE(pool.add("b", dirs_[1]).ok());
  ASSERT_TRUE(pool.add("c", dirs_[2]).ok());  // evicts a
  EXPECT_EQ(resident(pool), (std::vector<bool>{false, true, true}));
  ASSERT_TRUE(pool.acquire("b").ok());  // b is now more recent than c
  ASSERT_TRUE(pool.acquire("a").ok());  // reloads a, evicts c
  EXPECT_EQ(resident(pool), (std::vector<bool>{true, true, false}));
  const LoraPoolStats s = pool.stats();
  EXPECT_EQ(s.evictions, 2);
  EXPECT_EQ(s.loads, 4);
  EXPECT_EQ(s.num_resident, 2);
  EXPECT_EQ(s.resident_bytes, 2 * bytes_);
}

TEST_F(LoraPoolTest, AdaptersInUseAreNeverEvicted) {
  LoraPool pool(config_, {.max_loras = 8, .memory_bytes = 2 * bytes_});
  ASSERT_TRUE(pool.add("a", dirs_[0]).ok());
  ASSERT_TRUE(pool.add("b", dirs_[1]).ok());
  ASSERT_TRUE(pool.add("c", dirs_[2]).ok());  // over the budget: evicts a
  auto b = pool.acquire("b");
  auto c = pool.acquire("c");
  ASSERT_TRUE(b.ok() && c.ok());
  const Result<AcquiredLora> a = pool.acquire("a");
  EXPECT_EQ(a.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(a.status().message().find("all serve requests in flight; retry later, or raise --max-loras or "
                                      "--lora-memory-mib"),
            std::string::npos)
      << a.status().message();
  c = Status::cancelled("released");  // the request holding c finished
  EXPECT_TRUE(pool.acquire("a").ok());
  EXPECT_EQ(resident(pool), (std::vector<bool>{true, true, false}));
}

TEST_F(LoraPoolTest, AdapterLargerThanTheBudgetIsRefused) {
  LoraPool pool(config_, {.max_loras = 8, .memory_bytes = bytes_ - 1});
  const Status s = pool.add("a", dirs_[0]);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("more than the whole LoRA budget"), std::string::npos) << s.message();
  EXPECT_FALSE(pool.contains("a"));
}

}  // namespace
}  // namespace koi::engine
