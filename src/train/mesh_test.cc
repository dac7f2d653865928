#include "train/mesh.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <utility>

#include "train/testing_communicator.h"

namespace koi::train {
namespace {

// Rank `rank` of `size`, alone: records the (color, key) of every split, in call order.
class SplitRecorder final : public RefusingCommunicator {
 public:
  SplitRecorder(int rank, int size, std::vector<std::pair<int, int>>* splits)
      : RefusingCommunicator(rank, size), splits_(splits) {}
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    splits_->emplace_back(color, key);
    return std::unique_ptr<Communicator>(new LocalCommunicator());
  }

 private:
  std::vector<std::pair<int, int>>* splits_;
};

TEST(MeshShape, DpFillsTheWorld) {
  Result<MeshShape> s = resolve_mesh({.dp = 0, .tp = 2}, 8);
  ASSERT_TRUE(s.ok()) << s.status().message();
  EXPECT_EQ(s->dp, 4);
  EXPECT_EQ(s->to_string(), "dp=4 tp=2 pp=1 ep=1");
}

TEST(MeshShape, ProductOtherThanTheWorldIsRefusedWithTheNumbers) {
  Result<MeshShape> s = resolve_mesh({.dp = 2, .tp = 2}, 2);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().message(),
            "mesh: dp 2 x tp 2 x pp 1 x ep 1 = 4 ranks, but the job has 2; make the product equal the rank count "
            "(mpirun -np 4) or leave --dp out to fill the rest");
  Result<MeshShape> t = resolve_mesh({.dp = 0, .tp = 2, .pp = 2}, 6);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(),
            "mesh: tp 2 x pp 2 x ep 1 = 4 does not divide the 6 ranks; start a multiple of 4 ranks (mpirun -np) or "
            "change --tp/--pp/--ep");
  EXPECT_FALSE(resolve_mesh({.dp = 1, .tp = 0}, 1).ok());
}

TEST(Mesh, TensorParallelIsInnermostThenExpertThenPipelineThenData) {
  const MeshShape shape{.dp = 2, .tp = 2, .pp = 3, .ep = 2};  // 24 ranks
  // rank = ((dp * pp + pp_rank) * ep + ep_rank) * tp + tp_rank
  EXPECT_EQ(Mesh::coordinates(shape, 0), (std::array<int, 4>{0, 0, 0, 0}));
  EXPECT_EQ(Mesh::coordinates(shape, 1), (std::array<int, 4>{0, 0, 0, 1}));
  EXPECT_EQ(Mesh::coordinates(shape, 2), (std::array<int, 4>{0, 0, 1, 0}));
  EXPECT_EQ(Mesh::coordinates(shape, 4), (std::array<int, 4>{0, 1, 0, 0}));
  EXPECT_EQ(Mesh::coordinates(shape, 12), (std::array<int, 4>{1, 0, 0, 0}));
  EXPECT_EQ(Mesh::coordinates(shape, 23), (std::array<int, 4>{1, 2, 1, 1}));
}

// Every rank of an 8-rank dp 2 x pp 2 x tp 2 mesh splits; the ranks that chose the same color
// for an axis form its groups, ordered by key.
TEST(Mesh, AxisGroupsAreTheRanksEqualInEveryOtherCoordinate) {
  const MeshShape shape{.dp = 2, .tp = 2, .pp = 2};
  std::map<std::pair<int, int>, std::map<int, int>> groups;  // (axis, color) -> key -> rank
  for (int rank = 0; rank < 8; ++rank) {
    std::vector<std::pair<int, int>> splits;
    SplitRecorder world(rank, 8, &splits);
    Result<Mesh> mesh = Mesh::create(world, shape);
    ASSERT_TRUE(mesh.ok()) << mesh.status().message();
    ASSERT_EQ(splits.size(), 4u);
    for (int axis = 0; axis < 4; ++axis) {
      auto [color, key] = splits[static_cast<size_t>(axis)];
      const bool fresh = groups[{axis, color}].emplace(key, rank).second;
      EXPECT_TRUE(fresh) << "two ranks with one key";
    }
    EXPECT_EQ(mesh->tp_rank(), rank % 2);
    EXPECT_EQ(mesh->pp_rank(), rank / 2 % 2);
    EXPECT_EQ(mesh->dp_rank(), rank / 4);
  }
  auto members = [&](int axis) {
    std::set<std::vector<int>> out;
    for (const auto& [id, ranks] : groups) {
      if (id.first != axis) continue;
      std::vector<int> g;
      for (const auto& [key, rank] : ranks) g.push_back(rank);
      out.insert(g);
    }
    return out;
  };
  EXPECT_EQ(members(Mesh::kTp), (std::set<std::vector<int>>{{0, 1}, {2, 3}, {4, 5}, {6, 7}}));
  EXPECT_EQ(members(Mesh::kPp), (std::set<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(members(Mesh::kDp), (std::set<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(members(Mesh::kEp).size(), 8u);  // ep 1: every rank alone
}

TEST(Mesh, OneProcessHasEveryAxisOfSizeOne) {
  LocalCommunicator world;
  Result<Mesh> mesh = Mesh::create(world, {});
  ASSERT_TRUE(mesh.ok()) << mesh.status().message();
  for (Communicator* axis : {&mesh->dp(), &mesh->tp(), &mesh->pp(), &mesh->ep()}) EXPECT_EQ(axis->size(), 1);
  EXPECT_EQ(&mesh->world(), &world);
}

}  // namespace
}  // namespace koi::train
