#include "train/parallel_layout.h"

#include <string>

namespace koi::train {
namespace {

std::string str(int n) { return std::to_string(n); }

// Mesh axes against each other and against ZeRO.
Status check_axes(const TrainConfig& c, const MeshShape& mesh) {
  const std::string zero = str(c.zero_stage);
  if (mesh.ep > 1 && (mesh.dp > 1 || mesh.tp > 1 || mesh.pp > 1)) {
    return Status::unsupported("mesh " + mesh.to_string() + ": expert parallelism (--ep) does not combine with " +
                               "--dp, --tp or --pp yet; run --ep " + str(mesh.ep) + " alone (mpirun -np " +
                               str(mesh.ep) + ", its ranks also split the batch)");
  }
  if (mesh.pp > 1 && c.zero_stage != 0) {
    return Status::unsupported("--zero " + zero + " with --pp " + str(mesh.pp) +
                               ": the pipeline stages keep their own AdamW and ZeRO does not shard them yet; use "
                               "--zero 0 with --pp, or --zero " + zero + " with --dp alone");
  }
  if (mesh.ep > 1 && c.zero_stage >= 2) {
    return Status::unsupported("--zero " + zero + " with --ep: ZeRO-2/3 do not shard expert-parallel models yet; use "
                               "--zero 0 or 1 with --ep");
  }
  if (c.zero_stage >= 2 && c.lora.rank > 0) {
    return Status::invalid_argument("train.zero " + zero +
                                    " shards the whole model's weights and gradients, and a LoRA run trains only its "
                                    "adapters; use zero 0 or 1 with lora_rank");
  }
  if (c.zero_stage >= 2 && mesh.tp > 1) {
    return Status::unsupported("--zero " + zero + " with --tp " + str(mesh.tp) +
                               ": ZeRO-2/3 do not shard tensor-parallel shards yet; use --zero 1 with --tp, or "
                               "--zero " + zero + " with --dp alone");
  }
  return ok_status();
}

// The batch over the ranks that split it, and each one's part over the micro-batches.
Status check_batch(const TrainConfig& c, const MeshShape& mesh) {
  // The ranks that split the batch: the dp group, or under expert parallelism the ep group.
  const int data_ranks = mesh.ep > 1 ? mesh.ep : mesh.dp;
  if (c.batch_size % data_ranks != 0) {
    return Status::invalid_argument(
        "train.batch_size " + str(c.batch_size) + " does not split over " + str(data_ranks) +
        (data_ranks == mesh.world() ? " ranks; use a multiple of the rank count"
                                    : " data-parallel ranks (--dp); use a multiple of the dp size"));
  }
  const int per_rank = c.batch_size / data_ranks, micro = c.pipeline.micro_batches;
  if (mesh.pp > 1 && per_rank % micro != 0) {
    const std::string what = data_ranks > 1 ? " over --dp " + str(data_ranks) + " leaves each pipeline " +
                                                  str(per_rank) + " sequences, which do not split"
                                            : " does not split";
    return Status::invalid_argument("train.batch_size " + str(c.batch_size) + what + " into " + str(micro) +
                                    " micro-batches; use a --pp-microbatches that divides " + str(per_rank));
  }
  return ok_status();
}

}  // namespace

Status check_parallel_layout(const TrainConfig& c, const MeshShape& mesh) {
  KOI_RETURN_IF_ERROR(check_axes(c, mesh));
  if (!c.overlap && (mesh.pp > 1 || c.lora.rank > 0)) {
    return Status::invalid_argument(std::string("--no-overlap (train.overlap: false) turns off the overlap of the "
                                                "gradient reduction with the backward pass, which ") +
                                    (mesh.pp > 1 ? "a pipeline" : "a LoRA run") +
                                    " does not overlap yet; leave it out");
  }
  return check_batch(c, mesh);
}

}  // namespace koi::train
