// check_parallel_layout: the one check, at the start of a run, that a recipe's parallel layout
// (the device mesh, --zero, --no-overlap, the pipeline's micro-batches) is one this trainer
// runs. Every combination it does not run is refused with InvalidArgument or Unsupported and a
// message naming what to use instead, so no flag is silently ignored. A pure function of the
// config and the resolved mesh: no communication, no state, thread-safe. Checks that need the
// model (heads that --tp divides, experts for --ep) are made where the model is built
// (tensor_parallel.h, trainer.cc).
#pragma once

#include "base/status.h"
#include "train/mesh.h"
#include "train/trainer.h"

namespace koi::train {

// mesh: resolved (dp filled in, resolve_mesh). ok when the trainer runs `c` on `mesh`.
Status check_parallel_layout(const TrainConfig& c, const MeshShape& mesh);

}  // namespace koi::train
