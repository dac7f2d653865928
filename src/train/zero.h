// ShardedDataParallel: ZeRO stages 2 and 3 (FSDP) over the data-parallel ranks of a
// Communicator, for LlamaTrain (the trainer uses it for `--zero 2` and `--zero 3`).
//
// Each unit of the model (UnitStream in llama_train.h: every layer, and the root with the
// embedding, final norm and output) is split evenly over the N ranks: rank r owns part r of
// each unit's flat parameters (split_range over the unit's pieces one after the other) and
// keeps only that part's gradient and AdamW moments (m, v).
//   Stage 2: every rank keeps all the weights in the model's params(); the model's grads() is
//     released. During backward each unit's gradient goes to a temporary buffer and is
//     reduce-scattered into the owners' gradient parts when the unit's backward is done;
//     AdamW updates this rank's part, then the weights are allgathered unit by unit.
//   Stage 3: the model keeps no weights (params() and grads() are released): a unit's weights
//     are allgathered just before its forward and again before its backward, and freed after
//     each; AdamW updates this rank's part in place.
// Overlap (on by default): the collectives are non-blocking. Stage 3 starts the allgather of
// the next unit of the pass when it hands out a unit's weights (prefetch); a unit's gradient
// reduce-scatter runs while the backward pass goes on, waited when the next unit's starts
// (one in flight) and the last in finish_backward(); at each unit's end the communicator is
// given a chance to advance them (Communicator::progress). With overlap off each is waited at
// once.
// The result equals single-process training up to the order of the floating-point sums
// (AdamW is elementwise). Memory: every buffer of weights, gradients and AdamW state this rank
// holds (parts, gathered units, the model's params() and grads()) is counted, with its peak.
// A released unit buffer is kept for the next use of its size, so passes after the first
// allocate nothing.
// Failures: a failed collective (the watchdog's DeadlineExceeded) is kept, no further
// collective is started, and the status is returned by status() and every method that
// returns one; the process must then abort (collectives.h). Not thread-safe; every method
// that communicates is called on every rank in the same order.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "train/collectives.h"
#include "train/llama_train.h"
#include "train/optimizer.h"

namespace koi::train {

// What a rank holds, in bytes (report()).
struct ZeroMemory {
  int64_t one_process = 0;   // M: weights, gradients, AdamW m and v of the model in one process
  int64_t own = 0;           // this rank's parts of them (stage 2: plus every weight)
  int64_t working_set = 0;   // what the schedule holds gathered at once, besides `own`
  int64_t tracked_now = 0;   // every tracked buffer now
  int64_t tracked_peak = 0;  // their peak since reset_peak()
  int64_t peak_rss = 0;      // the process's peak resident set (getrusage)
  int64_t buffers_allocated = 0;  // unit buffers allocated since construction (later passes reuse them)
  std::string arithmetic;    // how own and working_set were computed, in words
};

class ShardedDataParallel final : public UnitStream {
 public:
  // Takes the model's weights (the same on every rank) as the start; stage 2 or 3. Attaches
  // itself to model as its UnitStream and releases what the stage does not keep. comm and
  // model must outlive this object.
  ShardedDataParallel(Communicator* comm, LlamaTrain* model, AdamWConfig config, int stage, bool overlap);
  ~ShardedDataParallel() override;
  ShardedDataParallel(const ShardedDataParallel&) = delete;
  ShardedDataParallel& operator=(const ShardedDataParallel&) = delete;

  // Before a step's first micro-batch: zeroes this rank's gradient part.
  void zero_grad();
  // After a step's last backward: waits for the reduction in flight.
  Status finish_backward();
  // Clips the global gradient norm (over every rank's part) to max_norm (<= 0: no clipping)
  // as clip_grad_norm does; returns the norm before clipping.
  Result<float> clip_grad_norm(float max_norm);
  // AdamW on this rank's part at learning rate lr; stage 2 then allgathers the weights.
  Status step(float lr, ThreadPool* pool);
  // Calls use(state) with the whole optimizer state gathered on every rank, while the model's
  // params() holds every weight (stage 3 gathers them for the call and releases them after).
  Status with_full_state(const std::function<Status(AdamW&)>& use);
  // Takes this rank's part of a whole optimizer state (a checkpoint's).
  void load_full_state(AdamW& full);
  // The first failed collective, else OK.
  const Status& status() const { return status_; }

  ZeroMemory memory() const;
  void reset_peak() { peak_ = current(); }

  // UnitStream.
  const float* forward_params(int unit) override;
  void forward_done(int unit) override;
  const float* backward_params(int unit) override;
  float* backward_grads(int unit) override;
  void backward_done(int unit) override;

 private:
  struct Unit {
    std::vector<Range> pieces;    // of the flat layout, one after the other in the unit's buffer
    int64_t size = 0;
    std::vector<int64_t> counts;  // every rank's part size (allgather / reduce-scatter counts)
    Range mine;                   // this rank's part, in the unit's buffer
    int64_t own_offset = 0;       // where that part starts in params_, grads_, m and v
  };
  struct Reduction {  // a gradient reduce-scatter in flight
    int unit = -1;
    int64_t ticket = -1;
    std::vector<float> received;  // this rank's part of the sum
  };

  // Calls f(flat_begin, own_position, length) for each run of this rank's part of u.
  void for_each_own_run(const Unit& u, const std::function<void(int64_t, int64_t, int64_t)>& f) const;
  // Gathers the whole unit of `own` (an own-laid-out vector: params_, m or v; named `what` in
  // the collective's name) into buffer.
  Status gather_unit(int unit, const std::vector<float>& own, std::vector<float>& buffer, const std::string& what);
  // Gathers every unit of `own` into a flat vector (the model's layout).
  Status gather_flat(const std::vector<float>& own, std::vector<float>& flat, const std::string& what);
  // Stage 3: starts the allgather of unit's weights unless started; `wait` also completes it.
  void fetch(int unit, bool wait);
  void finish_reduction();
  bool failed(Status s);  // keeps the first failure; true when s failed

  // A unit buffer of n floats into v (zeroed: all 0; else its old contents, for a buffer a
  // collective overwrites whole), taken from the spares when one has that size. release() keeps
  // the buffer as a spare (still counted), so each pass reuses the buffers of the last one: what
  // is held is, per size, the most buffers of it the schedule ever used at once, which the
  // working set counts (memory()). free() returns a buffer to the allocator.
  void acquire(std::vector<float>& v, int64_t n, bool zeroed);
  void release(std::vector<float>& v);
  void free(std::vector<float>& v);
  int64_t current() const;

  Communicator* comm_;
  LlamaTrain* model_;
  AdamWConfig config_;
  int stage_;
  bool overlap_;
  std::vector<Unit> units_;
  int64_t own_size_ = 0;
  std::vector<ParamTensor> own_layout_;  // the tensors' runs in this rank's part, for AdamW
  std::vector<float> params_, grads_;    // this rank's part (laid out as own_layout_)
  AdamW opt_;                            // m and v of this rank's part
  std::vector<std::vector<float>> unit_params_, unit_grads_;  // gathered weights, gradients, by unit
  std::vector<int64_t> gathering_;       // ticket of the allgather in flight by unit, -1: none
  std::optional<Reduction> in_flight_;
  Status status_;
  std::vector<std::vector<float>> spares_;  // released unit buffers kept for reuse (counted in tracked_)
  int64_t tracked_ = 0, peak_ = 0;       // bytes of the buffers this object holds, and the peak
  int64_t allocated_ = 0;                // buffers acquire() allocated (not reused)
};

}  // namespace koi::train
