// Mesh: the device mesh of a parallel training job (`koi train --dp N --tp N --pp N --ep N`):
// the world's ranks arranged as a 4-D grid, each rank's coordinates on it, and one
// Communicator per axis (a process group, made by Communicator::split).
//
// Rank order is Megatron-LM's, tensor parallel innermost (neighbouring ranks, the fastest
// links, carry the per-layer traffic):
//   world rank = ((dp_rank * pp + pp_rank) * ep + ep_rank) * tp + tp_rank
// so with --dp 2 --tp 2 ranks 0,1 form one tensor-parallel group and ranks 0,2 one
// data-parallel group.
//
// The contract the parallel layers plug into:
//   - mesh.dp(): the data-parallel group. Each dp rank draws its own slice of the global batch;
//     gradient reduction (allreduce_grads, ZeRO's reduce-scatter/allgather, optimizer shards)
//     runs over dp() only, never over the world: the other axes hold different parameters.
//   - mesh.tp(): the tensor-parallel group (tensor_parallel.h): the ranks that share one layer's
//     matmuls and allreduce activations inside it. They see the same batch.
//   - mesh.pp(): the pipeline group: stage s sends activations to stage s+1 in pp().
//   - mesh.ep(): the expert-parallel group: experts divided, tokens exchanged by all-to-all.
//   - mesh.world(): everything that concerns the whole job (stop flags, step times, barriers).
// An axis of size 1 still has a communicator (of one rank), so code can use it unconditionally.
//
// Ownership: the Mesh owns the axis communicators; the world communicator is the caller's and
// must outlive the Mesh. Not thread-safe (like every Communicator). create() fails with
// InvalidArgument, naming the numbers, when the axes do not multiply to the world size.
#pragma once

#include <array>
#include <memory>
#include <string>

#include "base/status.h"
#include "train/collectives.h"

namespace koi::train {

// The requested size of each axis; 0 for dp means "the world size over tp * pp * ep".
struct MeshShape {
  int dp = 0, tp = 1, pp = 1, ep = 1;
  int world() const { return dp * tp * pp * ep; }
  std::string to_string() const;  // "dp=2 tp=2 pp=1 ep=1"
};

// The shape with dp filled in and checked against world_size: every axis positive and
// dp * tp * pp * ep == world_size, else InvalidArgument naming the numbers.
Result<MeshShape> resolve_mesh(MeshShape requested, int world_size);

class Mesh {
 public:
  enum Axis { kDp = 0, kPp = 1, kEp = 2, kTp = 3 };  // outermost first

  // Splits world into the axis groups (a collective: every rank calls it).
  static Result<Mesh> create(Communicator& world, MeshShape requested);

  const MeshShape& shape() const { return shape_; }
  Communicator& world() const { return *world_; }
  Communicator& dp() const { return *axes_[kDp]; }
  Communicator& tp() const { return *axes_[kTp]; }
  Communicator& pp() const { return *axes_[kPp]; }
  Communicator& ep() const { return *axes_[kEp]; }
  int dp_rank() const { return coord_[kDp]; }
  int tp_rank() const { return coord_[kTp]; }
  int pp_rank() const { return coord_[kPp]; }
  int ep_rank() const { return coord_[kEp]; }
  // Names the training step in the watchdog reports of the world and every axis.
  void set_step(int64_t step);

  // The coordinates of world rank `rank` under shape (outermost first: dp, pp, ep, tp).
  static std::array<int, 4> coordinates(const MeshShape& shape, int rank);

 private:
  Mesh() = default;

  MeshShape shape_;
  Communicator* world_ = nullptr;
  std::array<int, 4> coord_{};
  std::array<std::unique_ptr<Communicator>, 4> axes_;
};

}  // namespace koi::train
