#include "train/mesh.h"

#include <fmt/format.h>

namespace koi::train {
namespace {

// Sizes in Axis order (outermost first).
std::array<int, 4> sizes(const MeshShape& s) { return {s.dp, s.pp, s.ep, s.tp}; }

}  // namespace

std::string MeshShape::to_string() const { return fmt::format("dp={} tp={} pp={} ep={}", dp, tp, pp, ep); }

Result<MeshShape> resolve_mesh(MeshShape requested, int world_size) {
  MeshShape s = requested;
  if (s.tp < 1 || s.pp < 1 || s.ep < 1 || s.dp < 0) {
    return Status::invalid_argument("mesh " + s.to_string() + ": --tp, --pp and --ep must be at least 1, --dp at least 1");
  }
  const int model_parallel = s.tp * s.pp * s.ep;
  if (s.dp == 0) {
    if (world_size % model_parallel != 0) {
      return Status::invalid_argument(fmt::format(
          "mesh: tp {} x pp {} x ep {} = {} does not divide the {} ranks; start a multiple of {} ranks "
          "(mpirun -np) or change --tp/--pp/--ep",
          s.tp, s.pp, s.ep, model_parallel, world_size, model_parallel));
    }
    s.dp = world_size / model_parallel;
  }
  if (s.world() != world_size) {
    return Status::invalid_argument(fmt::format(
        "mesh: dp {} x tp {} x pp {} x ep {} = {} ranks, but the job has {}; make the product equal the rank count "
        "(mpirun -np {}) or leave --dp out to fill the rest",
        s.dp, s.tp, s.pp, s.ep, s.world(), world_size, s.world()));
  }
  return s;
}

std::array<int, 4> Mesh::coordinates(const MeshShape& shape, int rank) {
  const std::array<int, 4> n = sizes(shape);
  std::array<int, 4> c{};
  for (int axis = 3; axis >= 0; --axis) {  // innermost (tp) first
    c[axis] = rank % n[axis];
    rank /= n[axis];
  }
  return c;
}

void Mesh::set_step(int64_t step) {
  world_->set_step(step);
  for (const std::unique_ptr<Communicator>& axis : axes_) axis->set_step(step);
}

Result<Mesh> Mesh::create(Communicator& world, MeshShape requested) {
  KOI_ASSIGN_OR_RETURN(const MeshShape shape, resolve_mesh(requested, world.size()));
  Mesh mesh;
  mesh.shape_ = shape;
  mesh.world_ = &world;
  mesh.coord_ = coordinates(shape, world.rank());
  const std::array<int, 4> n = sizes(shape);
  for (int axis = 0; axis < 4; ++axis) {
    // The group of an axis: the ranks equal in every other coordinate. Color is the rank
    // with this axis's coordinate set to 0; key orders the group by the coordinate.
    int color = 0;
    for (int other = 0; other < 4; ++other) color = color * n[other] + (other == axis ? 0 : mesh.coord_[other]);
    KOI_ASSIGN_OR_RETURN(mesh.axes_[axis], world.split(color, mesh.coord_[axis]));
  }
  return mesh;
}

}  // namespace koi::train
