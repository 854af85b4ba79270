// SPDX-License-Identifier: MIT
// Process groups: the collectives data parallelism needs (all_reduce,
// broadcast, all_gather, barrier) over the engines clusters already run.
//
// A ProcessGroup is one set of processes (ranks 0..size-1) and a backend:
//   "local"  one process, no communication (every collective is the identity);
//            what a program gets when it is not launched by mpirun/srun, so
//            the same code runs alone or in a job
//   "mpi"    Open MPI (or any MPI), CPU tensors; built when SNUG_MPI finds MPI
//   "nccl"   NCCL, CUDA tensors; built in CUDA builds when SNUG_NCCL finds it
//
// Every collective has an `_async` form that starts the operation and returns
// a Work; `wait()` finishes it. Collectives must be called in the same order
// on every rank (as MPI and NCCL require).
//
// NOTE [ Collective timeouts ]
// No wait blocks forever. Work::wait() polls the request and throws a
// DistributedTimeoutError after the group's timeout (default 300 s, env
// SNUG_DIST_TIMEOUT in seconds) naming the op, this rank, the byte count and
// how long it waited: a rank that died, raised, or took another path leaves
// its peers with that error instead of a hang. After a timeout the group is
// broken (later collectives throw at once): the peers cannot be brought back
// in step, so the program should end, ideally with abort(), which stops the
// whole job (MPI_Abort) rather than leave ranks waiting on each other.
#pragma once
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/core/tensor.h>

namespace snug {

// A collective failed: a broken group, a backend error, mismatched tensors.
class DistributedError : public Error {
  using Error::Error;
};
// A collective did not finish within the group's timeout (NOTE [ Collective timeouts ]).
class DistributedTimeoutError : public DistributedError {
  using DistributedError::DistributedError;
};

namespace distributed {

enum class ReduceOp { sum, avg, max, min };
const char* reduce_op_name(ReduceOp op);

// A started collective. wait() returns when it is done on this rank (its
// output tensors then hold the result) or throws (timeout, backend error).
// Waiting twice is fine; dropping a Work without waiting is not: the
// operation still runs and the group keeps it until it ends.
class Work {
 public:
  virtual ~Work() = default;
  virtual bool is_completed() = 0;  // polls; never blocks
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual const char* backend() const = 0;
  // Where this group's tensors live: the CPU for the local and MPI groups,
  // the group's GPU for NCCL.
  virtual Device device() const { return kCPU; }

  // In place: t becomes the reduction of every rank's t. t is contiguous, on
  // the group's device kind, and has the same shape and dtype on every rank.
  virtual std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op = ReduceOp::sum) = 0;
  // In place: every rank's t becomes root's t.
  virtual std::shared_ptr<Work> broadcast_async(const Tensor& t, int root = 0) = 0;
  // out (size, *in.shape) gets every rank's `in`, rank r at out[r].
  virtual std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out) = 0;
  virtual std::shared_ptr<Work> barrier_async() = 0;

  void all_reduce(const Tensor& t, ReduceOp op = ReduceOp::sum) { all_reduce_async(t, op)->wait(); }
  void broadcast(const Tensor& t, int root = 0) { broadcast_async(t, root)->wait(); }
  void all_gather(const Tensor& in, const Tensor& out) { all_gather_async(in, out)->wait(); }
  // A new (size, *in.shape) tensor of every rank's `in`.
  Tensor all_gather(const Tensor& in);
  void barrier() { barrier_async()->wait(); }

  // Stops every process of the job with this exit code (MPI_Abort); for a
  // rank that cannot go on and must not leave its peers waiting.
  [[noreturn]] virtual void abort(int code) = 0;

  std::chrono::milliseconds timeout() const { return timeout_; }
  void set_timeout(std::chrono::milliseconds t) { timeout_ = t; }
  bool broken() const { return !broken_reason_.empty(); }

 protected:
  ProcessGroup(int rank, int size);
  // Checks shared by every backend: defined, contiguous, rank in range...
  void check_tensor(const char* op, const Tensor& t) const;
  void check_usable(const char* op) const;  // throws if broken
  void mark_broken(std::string why) {
    if (broken_reason_.empty()) broken_reason_ = std::move(why);
  }

  int rank_, size_;
  std::chrono::milliseconds timeout_;
  std::string broken_reason_;
};

// A finished Work (single-process groups, zero-sized tensors).
std::shared_ptr<Work> completed_work();

// ---- finding the world and making the group ---------------------------------

// Who this process is, from the launcher's environment: Open MPI's mpirun
// (OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK), MPICH/Hydra and Intel MPI
// (PMI_RANK/PMI_SIZE), Slurm's srun (SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID),
// or explicit SNUG_RANK/SNUG_WORLD_SIZE (checked first). Without any of them,
// rank 0 of 1 from "none".
struct WorldInfo {
  int rank = 0, size = 1, local_rank = 0;
  std::string source = "none";  // which variables said so
};
WorldInfo detect_world();

struct InitOptions {
  // "auto": mpi when the world has more than one process (an error if this
  // build has no MPI), else local. Or "mpi", "local".
  std::string backend = "auto";
  // 0: SNUG_DIST_TIMEOUT seconds if set, else 300 s.
  std::chrono::milliseconds timeout{0};
};

// Makes the process group for this process (MPI is initialized once per
// process and finalized at exit). The result is also the default group.
std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opt = {});
// The group made by init_process_group, or null.
std::shared_ptr<ProcessGroup> default_group();

// A group of one (backend "local").
std::shared_ptr<ProcessGroup> make_local_group();

// Whether this build has the MPI / NCCL backend.
bool mpi_available();
bool nccl_available();

// The group's default timeout from SNUG_DIST_TIMEOUT (seconds), else 300 s.
std::chrono::milliseconds default_timeout();

}  // namespace distributed
}  // namespace snug
