// SPDX-License-Identifier: MIT
// ProcessGroup's shared checks, the local (one-process) group, finding the
// world from the launcher's environment, and init_process_group.
#include <snug/distributed/process_group.h>

#include <cstdlib>
#include <mutex>

#include <snug/distributed/mpi.h>

namespace snug::distributed {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return "sum";
    case ReduceOp::avg:
      return "avg";
    case ReduceOp::max:
      return "max";
    case ReduceOp::min:
      return "min";
  }
  return "?";
}

std::chrono::milliseconds default_timeout() {
  if (const char* s = std::getenv("SNUG_DIST_TIMEOUT"); s && *s) {
    char* end = nullptr;
    double sec = std::strtod(s, &end);
    SNUG_CHECK(end && *end == 0 && sec > 0, ValueError,
               "SNUG_DIST_TIMEOUT must be a positive number of seconds, got \"", s, "\"");
    return std::chrono::milliseconds(static_cast<int64_t>(sec * 1000.0));
  }
  return std::chrono::seconds(300);
}

ProcessGroup::ProcessGroup(int rank, int size) : rank_(rank), size_(size), timeout_(default_timeout()) {
  SNUG_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "ProcessGroup: rank ", rank, " is not in [0, ", size,
             ")");
}

void ProcessGroup::check_usable(const char* op) const {
  SNUG_CHECK(!broken(), DistributedError, op, " on rank ", rank_, ": the ", backend(), " process group is broken (",
             broken_reason_, "); the ranks are out of step, end the job");
}

void ProcessGroup::check_tensor(const char* op, const Tensor& t) const {
  check_usable(op);
  SNUG_CHECK(t.defined(), ValueError, op, ": the tensor is undefined");
  SNUG_CHECK(t.is_contiguous(), ValueError, op, ": the tensor must be contiguous (shape ", shape_str(t.shape()),
             "); call .contiguous() and copy the result back");
}

Tensor ProcessGroup::all_gather(const Tensor& in) {
  Shape s = in.shape();
  s.insert(s.begin(), size_);
  Tensor out = empty(s, in.options());
  all_gather(in, out);
  return out;
}

namespace {

class DoneWork : public Work {
 public:
  bool is_completed() override { return true; }
  void wait() override {}
};

// One process: every collective is already complete.
class LocalGroup : public ProcessGroup {
 public:
  LocalGroup() : ProcessGroup(0, 1) {}
  const char* backend() const override { return "local"; }
  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t);
    return completed_work();
  }
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    SNUG_CHECK(root == 0, ValueError, "broadcast: root ", root, " is not a rank of a group of 1");
    return completed_work();
  }
  std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out) override {
    check_tensor("all_gather", in);
    check_tensor("all_gather", out);
    SNUG_CHECK(out.numel() == in.numel() && out.dim() == in.dim() + 1 && out.size(0) == 1 && out.dtype() == in.dtype(),
               ShapeError, "all_gather: out must be (1, *in.shape) = 1 x ", shape_str(in.shape()), " of dtype ",
               dtype_name(in.dtype()), ", got ", shape_str(out.shape()), " ", dtype_name(out.dtype()));
    out.select(0, 0).copy_(in);
    return completed_work();
  }
  std::shared_ptr<Work> barrier_async() override { return completed_work(); }
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  if (!s || !*s) return fallback;
  char* end = nullptr;
  long v = std::strtol(s, &end, 10);
  SNUG_CHECK(end && *end == 0 && v >= 0, ValueError, "environment variable ", name,
             " must be a non-negative integer, got \"", s, "\"");
  return static_cast<int>(v);
}

std::mutex g_mutex;
std::shared_ptr<ProcessGroup> g_default;

}  // namespace

std::shared_ptr<Work> completed_work() {
  static auto done = std::make_shared<DoneWork>();
  return done;
}

std::shared_ptr<ProcessGroup> make_local_group() { return std::make_shared<LocalGroup>(); }

WorldInfo detect_world() {
  struct Source {
    const char *name, *rank, *size, *local;
  };
  // Explicit settings first, then the launchers.
  static const Source sources[] = {
      {"SNUG_RANK/SNUG_WORLD_SIZE", "SNUG_RANK", "SNUG_WORLD_SIZE", "SNUG_LOCAL_RANK"},
      {"Open MPI (OMPI_COMM_WORLD_*)", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK"},
      {"PMI (PMI_RANK/PMI_SIZE)", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"},
      {"Slurm (SLURM_PROCID/SLURM_NTASKS)", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"},
  };
  for (const Source& s : sources) {
    const char* r = std::getenv(s.rank);
    const char* n = std::getenv(s.size);
    if (!r || !n) continue;
    WorldInfo w;
    w.rank = env_int(s.rank, 0);
    w.size = env_int(s.size, 1);
    w.local_rank = env_int(s.local, 0);
    w.source = s.name;
    SNUG_CHECK(w.size >= 1 && w.rank < w.size, ValueError, "detect_world: ", s.name, " says rank ", w.rank, " of ",
               w.size, " processes");
    return w;
  }
  return {};
}

std::shared_ptr<ProcessGroup> init_process_group(const InitOptions& opt) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_default) return g_default;
  const WorldInfo w = detect_world();
  std::string backend = opt.backend;
  if (backend == "auto") backend = w.size > 1 ? "mpi" : "local";
  const auto timeout = opt.timeout.count() > 0 ? opt.timeout : default_timeout();
  if (backend == "local") {
    SNUG_CHECK(w.size == 1, DistributedError, "init_process_group: backend local is one process, but ", w.source,
               " says this is rank ", w.rank, " of ", w.size);
    g_default = make_local_group();
  } else if (backend == "mpi") {
    if (!mpi_available()) {  // make_mpi_group says why (no MPI plugin: not built, or it did not load)
      try {
        (void)make_mpi_group(timeout);
      } catch (const DistributedError& e) {
        throw DistributedError(
            str("init_process_group: ", w.source, " says this is rank ", w.rank, " of ", w.size, ", but ", e.what()));
      }
    }
    g_default = make_mpi_group(timeout);
  } else {
    throw ValueError(str("init_process_group: unknown backend \"", backend,
                         "\" (auto, mpi or local; NCCL groups come from make_nccl_group)"));
  }
  g_default->set_timeout(timeout);
  return g_default;
}

std::shared_ptr<ProcessGroup> default_group() {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_default;
}

}  // namespace snug::distributed
