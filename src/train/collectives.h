// Communicator: the collectives data-parallel training needs (sum-allreduce, allgather,
// sum-reduce-scatter, broadcast, barrier; allgather and reduce-scatter also non-blocking, for
// ZeRO-2/3's overlap, zero.h; alltoallv for expert parallelism) and the point-to-point
// messages pipeline parallelism needs (send, recv: activations and their gradients between
// neighbouring stages) behind one small interface, with two implementations:
//   LocalCommunicator  one process, size 1; every collective is a no-op (a reduce-scatter
//                      or an alltoallv copies its input to its output); send and recv refuse
//                      (there is no peer).
//   MPI                `mpirun -np N koi train ...`: MPI_COMM_WORLD through Debian's OpenMPI.
// Every collective but reduce-scatter is in place, and each names itself (`what`, "allreduce
// grads bucket 3") so that a hang can be reported. The MPI implementation issues non-blocking collectives and polls
// them against a Watchdog deadline (watchdog.h): when a collective has not completed within
// the timeout, it asks every peer to answer a roll call and returns DeadlineExceeded with
//   watchdog: rank 0 step 12: collective 'allreduce grads bucket 3' did not complete within
//   5 s; not responding: rank 1
// The process must then call abort(), not return normally:
// MPI cannot be shut down with a collective pending. A watchdog thread ends a rank still
// blocked at twice the timeout (stuck where it cannot poll). Errors inside MPI end the job (MPI's
// default handler). Not thread-safe: one thread (the training loop) calls the collectives.
// split() makes a communicator over a subset of the ranks (MPI_Comm_split: the process groups
// of a device mesh, mesh.h) with the same watchdog semantics; its reports name world ranks.
// A split communicator must be destroyed before the one it came from.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/status.h"

namespace koi::train {

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The training step in progress; only used to name a collective that hangs.
  virtual void set_step(int64_t step) = 0;

  // data[i] = sum over ranks of data[i]; every rank gets the same result.
  virtual Status allreduce_sum(float* data, int64_t n, std::string_view what) = 0;
  virtual Status allreduce_sum(double* data, int64_t n, std::string_view what) = 0;
  // Rank r's part is data[offset_r, offset_r + counts[r]) with offset_r = counts[0] + ... +
  // counts[r-1]; on return every rank holds every part. counts has size() entries.
  virtual Status allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) = 0;
  // in holds counts[0] + ... + counts[size()-1] floats on every rank; out (counts[rank()] floats,
  // not overlapping in) receives part rank() of their sum over the ranks (parts laid out as in
  // allgather).
  virtual Status reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                    std::string_view what) = 0;
  // Non-blocking allgather and reduce-scatter: start_* begins the collective and returns its
  // ticket; its buffers (and nothing else) must stay untouched until wait(ticket) has returned.
  // Every rank starts the same collectives in the same order. wait() polls against the
  // watchdog as the blocking forms do; every ticket is waited exactly once. This default runs
  // the blocking form at start and hands its status to wait() (no overlap).
  virtual int64_t start_allgather(float* data, const std::vector<int64_t>& counts, std::string what);
  virtual int64_t start_reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                           std::string what);
  // Non-blocking allreduce_sum of data[0, n) in place (ZeRO-0/1's overlapped gradient sum).
  virtual int64_t start_allreduce_sum(float* data, int64_t n, std::string what);
  virtual Status wait(int64_t ticket);
  // Lets started collectives advance (MPI moves a non-blocking collective's data mostly inside
  // MPI calls); call it between pieces of compute. Default: nothing.
  virtual void progress() {}
  // Copies root's bytes to every rank.
  virtual Status broadcast(void* data, int64_t bytes, int root, std::string_view what) = 0;
  virtual Status barrier(std::string_view what) = 0;
  // The ranks that call it with the same color, ordered by key (then by rank): MPI_Comm_split.
  // Every rank must call it; it blocks (not under the watchdog) and has the same timeout.
  virtual Result<std::unique_ptr<Communicator>> split(int color, int key) = 0;
  // Personalised all-to-all: send[o_d, o_d + send_counts[d]) goes to rank d (o_d the sum of
  // the counts before d); recv gets rank s's part at the sum of recv_counts before s. Both
  // count vectors have size() entries; recv_counts[s] must be what s sends here.
  virtual Status alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                           const std::vector<int64_t>& recv_counts, std::string_view what) = 0;
  // Point to point. send copies data[0, n) and returns once the message is posted (it never
  // waits for the receiver, so two neighbours may send to each other at once); the message
  // completes in the background and at the latest inside this rank's next collective. recv
  // waits (against the watchdog, like a collective) for n floats from rank src. Messages
  // between two ranks arrive in the order they were sent; n must match on both sides.
  virtual Status send(const float* data, int64_t n, int dest, std::string_view what) = 0;
  virtual Status recv(float* data, int64_t n, int src, std::string_view what) = 0;
  // Ends every rank of the job with exit_code; for a job that cannot continue.
  [[noreturn]] virtual void abort(int exit_code) = 0;

 private:
  std::vector<std::pair<int64_t, Status>> done_;  // the default start_*'s results, by ticket
  int64_t next_ticket_ = 0;
};

class LocalCommunicator final : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void set_step(int64_t) override {}
  Status allreduce_sum(float*, int64_t, std::string_view) override { return ok_status(); }
  Status allreduce_sum(double*, int64_t, std::string_view) override { return ok_status(); }
  Status allgather(float*, const std::vector<int64_t>&, std::string_view) override { return ok_status(); }
  // Copies in to out (the one part is the whole).
  Status reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                            std::string_view what) override;
  Status broadcast(void*, int64_t, int, std::string_view) override { return ok_status(); }
  Status barrier(std::string_view) override { return ok_status(); }
  Result<std::unique_ptr<Communicator>> split(int, int) override {
    return std::unique_ptr<Communicator>(new LocalCommunicator());
  }
  Status alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                   const std::vector<int64_t>&, std::string_view) override;  // a copy
  Status send(const float*, int64_t, int, std::string_view what) override;
  Status recv(float*, int64_t, int, std::string_view what) override;
  [[noreturn]] void abort(int exit_code) override;
};

// True when this process was started by mpirun (OpenMPI's OMPI_COMM_WORLD_SIZE or a PMI(x)
// launcher's variables are set).
bool launched_by_mpirun();

// The MPI communicator over MPI_COMM_WORLD (initialises MPI; the destructor finalises it).
// collective_timeout_s > 0 bounds every collective. At most one per process.
Result<std::unique_ptr<Communicator>> create_mpi_communicator(double collective_timeout_s);

// MPI when launched_by_mpirun(), else a LocalCommunicator.
Result<std::unique_ptr<Communicator>> create_communicator(double collective_timeout_s);

}  // namespace koi::train
