#include "train/collectives.h"

// The C API only: OpenMPI's mpi.h otherwise pulls in its C++ bindings, which live in a
// library we do not link.
#define OMPI_SKIP_MPICXX 1
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <iterator>
#include <list>
#include <map>
#include <optional>
#include <thread>

#include "base/check.h"
#include "train/watchdog.h"

namespace koi::train {
namespace {

constexpr int kRollCallTag = 7301;  // point-to-point "I am alive" messages after a timeout
constexpr int kMessageTag = 7302;   // send / recv (pipeline activations and gradients)
constexpr double kSpinSeconds = 1e-3;  // poll a collective flat out this long, then sleep between polls
constexpr auto kPollSleep = std::chrono::microseconds(50);

int mpi_count(int64_t n) {
  KOI_CHECK(n >= 0 && n <= INT_MAX);
  return static_cast<int>(n);
}

class MpiCommunicator final : public Communicator {
 public:
  // comm: MPI_COMM_WORLD (finalised by the destructor) or a communicator split from it (freed).
  MpiCommunicator(MPI_Comm comm, double timeout_s)
      : comm_(comm), rank_(comm_rank(comm)), size_(comm_size(comm)), world_ranks_(world_ranks(comm)),
        watchdog_(world_ranks_[static_cast<size_t>(rank_)], timeout_s, &SystemClock::instance()), heard_(size_, 0),
        answered_(size_, 0) {
    // Past twice the timeout the rank is stuck somewhere it cannot poll: end it.
    watchdog_.start_thread(timeout_s);
  }
  ~MpiCommunicator() override {
    // After a timeout a peer may never receive: leave its sends (the job is being aborted).
    for (PendingSend& s : sends_) {
      if (!timed_out_) MPI_Wait(&s.request, MPI_STATUS_IGNORE);
    }
    if (comm_ == MPI_COMM_WORLD) {
      MPI_Finalize();
    } else {
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void set_step(int64_t step) override { step_ = step; }

  Status allreduce_sum(float* data, int64_t n, std::string_view what) override {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(n), MPI_FLOAT, MPI_SUM, comm_, &request);
    return collective_wait(&request, what);
  }
  Status allreduce_sum(double* data, int64_t n, std::string_view what) override {
    MPI_Request request;
    MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(n), MPI_DOUBLE, MPI_SUM, comm_, &request);
    return collective_wait(&request, what);
  }
  Status allgather(float* data, const std::vector<int64_t>& counts, std::string_view what) override {
    return wait(start_allgather(data, counts, std::string(what)));
  }
  Status reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                            std::string_view what) override {
    return wait(start_reduce_scatter_sum(in, out, counts, std::string(what)));
  }
  int64_t start_allgather(float* data, const std::vector<int64_t>& counts, std::string what) override {
    Pending& p = begin_pending(counts, std::move(what));
    MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, data, p.counts.data(), p.displs.data(), MPI_FLOAT,
                    comm_, &p.request);
    return next_ticket_++;
  }
  int64_t start_reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                   std::string what) override {
    Pending& p = begin_pending(counts, std::move(what));
    MPI_Ireduce_scatter(in, out, p.counts.data(), MPI_FLOAT, MPI_SUM, comm_, &p.request);
    return next_ticket_++;
  }
  int64_t start_allreduce_sum(float* data, int64_t n, std::string what) override {
    Pending& p = pending_[next_ticket_];
    p.what = std::move(what);
    MPI_Iallreduce(MPI_IN_PLACE, data, mpi_count(n), MPI_FLOAT, MPI_SUM, comm_, &p.request);
    return next_ticket_++;
  }
  void progress() override {
    for (auto& [ticket, p] : pending_) {
      int done = 0;
      MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);  // a completed request becomes MPI_REQUEST_NULL
    }
  }
  Status wait(int64_t ticket) override {
    auto it = pending_.find(ticket);
    KOI_CHECK(it != pending_.end());
    Pending p = std::move(it->second);  // the count arrays outlive the request: wait() finishes it
    pending_.erase(it);
    return collective_wait(&p.request, p.what);
  }
  Status broadcast(void* data, int64_t bytes, int root, std::string_view what) override {
    MPI_Request request;
    MPI_Ibcast(data, mpi_count(bytes), MPI_BYTE, root, comm_, &request);
    return collective_wait(&request, what);
  }
  Status barrier(std::string_view what) override {
    MPI_Request request;
    MPI_Ibarrier(comm_, &request);
    return collective_wait(&request, what);
  }
  Status alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                   const std::vector<int64_t>& recv_counts, std::string_view what) override {
    KOI_CHECK(static_cast<int>(send_counts.size()) == size_ && static_cast<int>(recv_counts.size()) == size_);
    std::vector<int> sc(size_), sd(size_), rc(size_), rd(size_);
    int64_t so = 0, ro = 0;
    for (int r = 0; r < size_; ++r) {
      sc[r] = mpi_count(send_counts[r]), sd[r] = mpi_count(so), so += send_counts[r];
      rc[r] = mpi_count(recv_counts[r]), rd[r] = mpi_count(ro), ro += recv_counts[r];
    }
    MPI_Request request;
    MPI_Ialltoallv(send, sc.data(), sd.data(), MPI_FLOAT, recv, rc.data(), rd.data(), MPI_FLOAT, comm_, &request);
    return collective_wait(&request, what);
  }
  Status send(const float* data, int64_t n, int dest, std::string_view) override {
    KOI_CHECK(dest >= 0 && dest < size_ && dest != rank_);
    sends_.push_back({std::vector<float>(data, data + n), MPI_REQUEST_NULL});
    PendingSend& s = sends_.back();
    MPI_Isend(s.data.data(), mpi_count(n), MPI_FLOAT, dest, kMessageTag, comm_, &s.request);
    test_sends();
    return ok_status();
  }
  Status recv(float* data, int64_t n, int src, std::string_view what) override {
    KOI_CHECK(src >= 0 && src < size_ && src != rank_);
    MPI_Request request;
    MPI_Irecv(data, mpi_count(n), MPI_FLOAT, src, kMessageTag, comm_, &request);
    return wait(&request, what);
  }
  Result<std::unique_ptr<Communicator>> split(int color, int key) override {
    MPI_Comm sub = MPI_COMM_NULL;
    if (MPI_Comm_split(comm_, color, key, &sub) != MPI_SUCCESS || sub == MPI_COMM_NULL) {
      return Status::internal("MPI_Comm_split failed (color " + std::to_string(color) + ")");
    }
    return std::unique_ptr<Communicator>(new MpiCommunicator(sub, watchdog_.timeout_s()));
  }
  [[noreturn]] void abort(int exit_code) override {
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, exit_code);
    std::_Exit(exit_code);
  }

 private:
  // A message send() posted, with its own copy of the data.
  struct PendingSend {
    std::vector<float> data;
    MPI_Request request;
  };

  // Frees the sends that have completed.
  void test_sends() {
    for (auto it = sends_.begin(); it != sends_.end();) {
      int done = 0;
      MPI_Test(&it->request, &done, MPI_STATUS_IGNORE);
      it = done ? sends_.erase(it) : std::next(it);
    }
  }

  // wait() for a collective, then for this communicator's sends still in flight: every rank
  // inside a collective has posted every recv that precedes it, so they complete now.
  Status collective_wait(MPI_Request* request, std::string_view what) {
    KOI_RETURN_IF_ERROR(wait(request, what));
    std::list<PendingSend> pending;  // out of sends_, which wait() prunes
    pending.swap(sends_);
    for (PendingSend& s : pending) KOI_RETURN_IF_ERROR(wait(&s.request, "send before " + std::string(what)));
    return ok_status();
  }

  // A started non-blocking collective: MPI reads the count arrays until it completes.
  struct Pending {
    MPI_Request request = MPI_REQUEST_NULL;
    std::string what;
    std::vector<int> counts, displs;
  };

  Pending& begin_pending(const std::vector<int64_t>& counts, std::string what) {
    KOI_CHECK(static_cast<int>(counts.size()) == size_);
    Pending& p = pending_[next_ticket_];
    p.what = std::move(what);
    int64_t offset = 0;
    for (int64_t n : counts) {
      p.counts.push_back(mpi_count(n));
      p.displs.push_back(mpi_count(offset));
      offset += n;
    }
    return p;
  }

  // Polls request until it completes or the watchdog says it is overdue; then runs the roll
  // call and returns DeadlineExceeded, leaving the watchdog armed as a backstop until abort().
  Status wait(MPI_Request* request, std::string_view what) {
    watchdog_.begin(what, step_);
    const auto start = std::chrono::steady_clock::now();
    for (int done = 0;;) {
      MPI_Test(request, &done, MPI_STATUS_IGNORE);
      if (done) break;
      test_sends();
      answer_roll_calls();
      if (std::optional<std::string> message = watchdog_.overdue()) {
        timed_out_ = true;
        return Status::deadline_exceeded(*message + roll_call());
      }
      if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > kSpinSeconds) {
        std::this_thread::sleep_for(kPollSleep);
      }
    }
    watchdog_.end();
    return ok_status();
  }

  // Sends this rank's roll-call message to peer once.
  void call(int peer) {
    if (answered_[peer]) return;
    answered_[peer] = 1;
    MPI_Request request;
    MPI_Isend(&rank_, 1, MPI_INT, peer, kRollCallTag, comm_, &request);
    MPI_Request_free(&request);  // rank_ outlives the send
  }

  // Receives one pending roll-call message, if any; records and answers its sender.
  bool receive_roll_call() {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kRollCallTag, comm_, &pending, &status);
    if (!pending) return false;
    int sender = 0;
    MPI_Recv(&sender, 1, MPI_INT, status.MPI_SOURCE, kRollCallTag, comm_, MPI_STATUS_IGNORE);
    heard_[status.MPI_SOURCE] = 1;
    call(status.MPI_SOURCE);
    return true;
  }

  void answer_roll_calls() {
    while (receive_roll_call()) {
    }
  }

  // After a timeout: tells every peer this rank is alive and listens for their answers for a
  // grace period. Returns the message's tail naming the peers that stayed silent.
  std::string roll_call() {
    for (int peer = 0; peer < size_; ++peer) {
      if (peer != rank_) call(peer);
    }
    const double grace_s = std::min(2.0, watchdog_.timeout_s() / 2);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(grace_s);
    auto silent = [&] {
      std::vector<int> out;
      for (int peer = 0; peer < size_; ++peer) {
        if (peer != rank_ && !heard_[peer]) out.push_back(peer);
      }
      return out;
    };
    while (!silent().empty() && std::chrono::steady_clock::now() < deadline) {
      if (!receive_roll_call()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const std::vector<int> missing = silent();
    if (missing.empty()) return "; every peer answered a roll call, so the collective itself is stuck";
    std::string out = "; not responding:";
    for (size_t i = 0; i < missing.size(); ++i) {
      out += (i ? ", rank " : " rank ") + std::to_string(world_ranks_[static_cast<size_t>(missing[i])]);
    }
    return out;
  }

  static int comm_rank(MPI_Comm comm) {
    int rank = 0;
    MPI_Comm_rank(comm, &rank);
    return rank;
  }
  static int comm_size(MPI_Comm comm) {
    int size = 0;
    MPI_Comm_size(comm, &size);
    return size;
  }
  // Each rank of comm's MPI_COMM_WORLD rank (what reports name), in comm's rank order.
  static std::vector<int> world_ranks(MPI_Comm comm) {
    MPI_Group group, world;
    MPI_Comm_group(comm, &group);
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    std::vector<int> mine(static_cast<size_t>(comm_size(comm))), out(mine.size());
    for (size_t r = 0; r < mine.size(); ++r) mine[r] = static_cast<int>(r);
    MPI_Group_translate_ranks(group, static_cast<int>(mine.size()), mine.data(), world, out.data());
    MPI_Group_free(&group);
    MPI_Group_free(&world);
    return out;
  }

  MPI_Comm comm_;
  const int rank_, size_;
  const std::vector<int> world_ranks_;
  int64_t step_ = 0;
  Watchdog watchdog_;
  std::vector<char> heard_;     // peers whose roll-call message arrived
  std::vector<char> answered_;  // peers this rank has sent its own roll-call message
  std::map<int64_t, Pending> pending_;  // started non-blocking collectives, by ticket
  std::list<PendingSend> sends_;  // posted by send(), not yet completed
  bool timed_out_ = false;        // a wait ran past the watchdog's deadline
  int64_t next_ticket_ = 0;
};

}  // namespace

int64_t Communicator::start_allgather(float* data, const std::vector<int64_t>& counts, std::string what) {
  done_.emplace_back(next_ticket_, allgather(data, counts, what));
  return next_ticket_++;
}

int64_t Communicator::start_reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                               std::string what) {
  done_.emplace_back(next_ticket_, reduce_scatter_sum(in, out, counts, what));
  return next_ticket_++;
}

int64_t Communicator::start_allreduce_sum(float* data, int64_t n, std::string what) {
  done_.emplace_back(next_ticket_, allreduce_sum(data, n, what));
  return next_ticket_++;
}

Status Communicator::wait(int64_t ticket) {
  auto it = std::find_if(done_.begin(), done_.end(), [&](const auto& d) { return d.first == ticket; });
  KOI_CHECK(it != done_.end());
  Status s = std::move(it->second);
  done_.erase(it);
  return s;
}

Status LocalCommunicator::reduce_scatter_sum(const float* in, float* out, const std::vector<int64_t>& counts,
                                             std::string_view) {
  KOI_CHECK(counts.size() == 1);
  if (in != out) std::copy_n(in, counts[0], out);
  return ok_status();
}

Status LocalCommunicator::alltoallv(const float* send, const std::vector<int64_t>& send_counts, float* recv,
                                    const std::vector<int64_t>&, std::string_view) {
  std::copy_n(send, send_counts.at(0), recv);
  return ok_status();
}

Status LocalCommunicator::send(const float*, int64_t, int, std::string_view what) {
  return Status::failed_precondition("send '" + std::string(what) +
                                     "': one process has no peer; start the ranks with mpirun -np N");
}

Status LocalCommunicator::recv(float*, int64_t, int, std::string_view what) {
  return Status::failed_precondition("recv '" + std::string(what) +
                                     "': one process has no peer; start the ranks with mpirun -np N");
}

void LocalCommunicator::abort(int exit_code) {
  std::fflush(stderr);
  std::_Exit(exit_code);
}

bool launched_by_mpirun() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMI_SIZE") != nullptr ||
         std::getenv("PMIX_RANK") != nullptr;
}

Result<std::unique_ptr<Communicator>> create_mpi_communicator(double collective_timeout_s) {
  if (!(collective_timeout_s > 0.0)) {
    return Status::invalid_argument("the collective timeout must be positive (--collective-timeout SECONDS)");
  }
  int provided = 0;
  if (MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS) {
    return Status::unavailable("MPI_Init_thread failed; start the ranks with mpirun (Debian's openmpi-bin)");
  }
  if (provided < MPI_THREAD_FUNNELED) {
    MPI_Finalize();
    return Status::unsupported("the MPI library does not support MPI_THREAD_FUNNELED, which the trainer needs");
  }
  return std::unique_ptr<Communicator>(new MpiCommunicator(MPI_COMM_WORLD, collective_timeout_s));
}

Result<std::unique_ptr<Communicator>> create_communicator(double collective_timeout_s) {
  if (launched_by_mpirun()) return create_mpi_communicator(collective_timeout_s);
  return std::unique_ptr<Communicator>(new LocalCommunicator());
}

}  // namespace koi::train
