// SPDX-License-Identifier: MIT
// The MPI process group: every collective is an MPI nonblocking collective
// (MPI_Iallreduce, MPI_Ibcast, MPI_Iallgather, MPI_Ibarrier) on the group's
// own communicator; Work::wait polls it with MPI_Test until it completes or
// the group's timeout passes (NOTE [ Collective timeouts ]). The only file
// that includes mpi.h; built into the MPI plugin, libsnug-mpi.so (NOTE [ The
// MPI plugin ] in distributed/mpi_loader.cpp).
//
// Threads: MPI is initialized with MPI_THREAD_SERIALIZED and one mutex
// serializes every MPI call snug makes, so a group may be used from any
// thread, one thread at a time (its list of collectives in flight is not
// locked).
#include <mpi.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <set>
#include <thread>

#include <snug/distributed/mpi.h>

namespace snug::distributed {

namespace {

// Both are used by finalize_at_exit, which runs among the static
// destructors: they are never destroyed.
std::mutex& mpi_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

std::string mpi_error(int code) {
  char buf[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(code, buf, &len);
  return std::string(buf, static_cast<size_t>(len));
}

#define SNUG_MPI_CHECK(call, op)                                                              \
  do {                                                                                        \
    int rc_ = (call);                                                                         \
    if (rc_ != MPI_SUCCESS) throw DistributedError(str(op, ": MPI error: ", mpi_error(rc_))); \
  } while (0)

class MpiGroup;
std::set<MpiGroup*>& live_groups() {  // guarded by mpi_mutex()
  static auto* s = new std::set<MpiGroup*>;
  return *s;
}

void finalize_at_exit();
// Collectives still outstanding when their group went (a broken group does not
// wait long for them): MPI_Finalize would wait for them forever.
std::atomic<size_t> g_orphaned{0};

// Initializes MPI once per process (unless the program did).
void ensure_mpi() {
  int inited = 0;
  MPI_Initialized(&inited);
  if (inited) return;
  int provided = 0;
  SNUG_MPI_CHECK(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "MPI_Init_thread");
  SNUG_CHECK(provided >= MPI_THREAD_SERIALIZED, DistributedError, "MPI_Init_thread: this MPI provides thread level ",
             provided, ", snug needs MPI_THREAD_SERIALIZED");
  std::atexit(finalize_at_exit);
}

MPI_Datatype mpi_type(DType d) {
  switch (d) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i8:
      return MPI_INT8_T;
    case DType::u8:
      return MPI_UINT8_T;
    case DType::i32:
      return MPI_INT32_T;
    case DType::i64:
      return MPI_INT64_T;
    default:
      return MPI_DATATYPE_NULL;  // f16/bf16/bool: no MPI arithmetic
  }
}

class MpiWork : public Work {
 public:
  MpiWork(MpiGroup* g, std::string what, std::vector<Tensor> keep, std::function<void()> finish)
      : group_(g), what_(std::move(what)), keep_(std::move(keep)), finish_(std::move(finish)) {}
  bool is_completed() override;
  void wait() override;
  // Polls until done or the deadline; true when done. Never throws on timeout.
  bool wait_until(std::chrono::steady_clock::time_point deadline);

  MPI_Request req = MPI_REQUEST_NULL;
  MpiGroup* group_;  // cleared when the group goes (it drains its works first)

 private:
  bool done_ = false;
  std::string what_;
  std::vector<Tensor> keep_;      // the buffers MPI reads and writes stay alive
  std::function<void()> finish_;  // after completion: avg's division
};

class MpiGroup : public ProcessGroup {
 public:
  MpiGroup(MPI_Comm comm, int rank, int size) : ProcessGroup(rank, size), comm_(comm) {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    live_groups().insert(this);
  }
  ~MpiGroup() override {
    // Give outstanding collectives (a Work dropped without wait) the timeout
    // to end, and those of a broken group a moment; the communicator can only
    // be freed after them.
    const auto grace = broken() ? std::chrono::milliseconds(2000) : timeout_;
    drain(std::chrono::steady_clock::now() + grace);
    std::lock_guard<std::mutex> lock(mpi_mutex());
    live_groups().erase(this);
    for (auto& w : inflight_) w->group_ = nullptr;
    const size_t left = pending_count();
    g_orphaned += left;
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && left == 0) MPI_Comm_free(&comm_);
  }
  const char* backend() const override { return "mpi"; }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check_tensor("all_reduce", t);
    check_cpu("all_reduce", t);
    MPI_Datatype type = mpi_type(t.dtype());
    SNUG_CHECK(type != MPI_DATATYPE_NULL, DTypeError, "all_reduce over MPI: dtype ", dtype_name(t.dtype()),
               " has no MPI arithmetic; reduce an f32 copy (DataParallel does this for f16/bf16 gradients)");
    SNUG_CHECK(op != ReduceOp::avg || t.is_floating_point(), DTypeError, "all_reduce: avg needs a floating dtype, got ",
               dtype_name(t.dtype()));
    check_count("all_reduce", t.numel());
    MPI_Op mop = op == ReduceOp::max ? MPI_MAX : op == ReduceOp::min ? MPI_MIN : MPI_SUM;
    std::function<void()> finish;
    if (op == ReduceOp::avg && size_ > 1) finish = [t, n = size_] { t.detach().div_(static_cast<double>(n)); };
    if (t.numel() == 0) return completed_work();
    auto w = make_work(str("all_reduce(", reduce_op_name(op), ") of ", t.nbytes(), " bytes (", dtype_name(t.dtype()),
                           " ", shape_str(t.shape()), ")"),
                       {t}, std::move(finish));
    start(w, "MPI_Iallreduce", [&](MPI_Request* r) {
      return MPI_Iallreduce(MPI_IN_PLACE, t.data_ptr(), static_cast<int>(t.numel()), type, mop, comm_, r);
    });
    return w;
  }

  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override {
    check_tensor("broadcast", t);
    check_cpu("broadcast", t);
    SNUG_CHECK(root >= 0 && root < size_, ValueError, "broadcast: root ", root, " is not a rank of this group of ",
               size_);
    check_count("broadcast", static_cast<int64_t>(t.nbytes()));
    if (t.numel() == 0) return completed_work();
    auto w = make_work(str("broadcast from rank ", root, " of ", t.nbytes(), " bytes (", shape_str(t.shape()), ")"),
                       {t}, {});
    start(w, "MPI_Ibcast", [&](MPI_Request* r) {
      return MPI_Ibcast(t.data_ptr(), static_cast<int>(t.nbytes()), MPI_BYTE, root, comm_, r);
    });
    return w;
  }

  std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out) override {
    check_tensor("all_gather", in);
    check_tensor("all_gather", out);
    check_cpu("all_gather", in);
    check_cpu("all_gather", out);
    Shape want = in.shape();
    want.insert(want.begin(), size_);
    SNUG_CHECK(out.shape() == want && out.dtype() == in.dtype(), ShapeError, "all_gather: out must be ",
               shape_str(want), " ", dtype_name(in.dtype()), " (size x in.shape), got ", shape_str(out.shape()), " ",
               dtype_name(out.dtype()));
    check_count("all_gather", static_cast<int64_t>(out.nbytes()));
    if (in.numel() == 0) return completed_work();
    auto w =
        make_work(str("all_gather of ", in.nbytes(), " bytes per rank (", shape_str(in.shape()), ")"), {in, out}, {});
    const int n = static_cast<int>(in.nbytes());
    start(w, "MPI_Iallgather", [&](MPI_Request* r) {
      return MPI_Iallgather(in.data_ptr(), n, MPI_BYTE, out.data_ptr(), n, MPI_BYTE, comm_, r);
    });
    return w;
  }

  std::shared_ptr<Work> barrier_async() override {
    check_usable("barrier");
    auto w = make_work("barrier", {}, {});
    start(w, "MPI_Ibarrier", [&](MPI_Request* r) { return MPI_Ibarrier(comm_, r); });
    return w;
  }

  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
  }

  void timed_out(const std::string& what, double seconds) {
    mark_broken(str(what, " timed out after ", seconds, " s"));
  }
  // Polls every in-flight collective until all are done or the deadline.
  void drain(std::chrono::steady_clock::time_point deadline) {
    for (auto& w : inflight_) w->wait_until(deadline);
    prune();
  }
  size_t pending_count() const {
    size_t n = 0;
    for (auto& w : inflight_) n += w->req != MPI_REQUEST_NULL;
    return n;
  }

 private:
  void check_cpu(const char* op, const Tensor& t) const {
    SNUG_CHECK(t.device().is_cpu(), DeviceError, op, " over MPI: the tensor is on ", t.device().str(),
               "; MPI groups take CPU tensors (use an NCCL group for CUDA tensors)");
  }
  void check_count(const char* op, int64_t n) const {
    SNUG_CHECK(n <= std::numeric_limits<int>::max(), ValueError, op, ": ", n,
               " elements is more than one MPI call takes (2^31 - 1); split the tensor");
  }
  std::shared_ptr<MpiWork> make_work(std::string what, std::vector<Tensor> keep, std::function<void()> finish) {
    return std::make_shared<MpiWork>(this, str(std::move(what), " on rank ", rank_, " of ", size_), std::move(keep),
                                     std::move(finish));
  }
  template <class F>
  void start(const std::shared_ptr<MpiWork>& w, const char* call, F&& f) {
    prune();
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      SNUG_MPI_CHECK(f(&w->req), call);
    }
    inflight_.push_back(w);
  }
  void prune() {
    std::erase_if(inflight_, [](const std::shared_ptr<MpiWork>& w) { return w->req == MPI_REQUEST_NULL; });
  }

  MPI_Comm comm_;
  std::vector<std::shared_ptr<MpiWork>> inflight_;
};

bool MpiWork::is_completed() {
  if (done_) return true;
  if (req != MPI_REQUEST_NULL) {
    int flag = 0;
    {
      std::lock_guard<std::mutex> lock(mpi_mutex());
      SNUG_MPI_CHECK(MPI_Test(&req, &flag, MPI_STATUS_IGNORE), what_);
    }
    if (!flag) return false;
  }
  done_ = true;
  if (finish_) finish_();
  keep_.clear();
  return true;
}

bool MpiWork::wait_until(std::chrono::steady_clock::time_point deadline) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  // Spin briefly (small collectives finish in microseconds), then sleep in
  // growing steps so a waiting rank leaves the cores to compute threads.
  auto nap = std::chrono::microseconds(20);
  while (!is_completed()) {
    const auto now = clock::now();
    if (now >= deadline) return false;
    if (now - t0 < std::chrono::microseconds(200)) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
      nap = std::min(nap * 2, std::chrono::microseconds(1000));
    }
  }
  return true;
}

void MpiWork::wait() {
  if (is_completed()) return;
  SNUG_CHECK(group_ != nullptr, DistributedError, what_,
             ": its process group was destroyed before the collective finished");
  // A broken group's peers are out of step: waiting again would only time out again.
  SNUG_CHECK(!group_->broken(), DistributedError, what_,
             ": the process group is broken (an earlier collective "
             "timed out); end the job");
  const auto t0 = std::chrono::steady_clock::now();
  const auto timeout = group_->timeout();
  if (wait_until(t0 + timeout)) return;
  const double sec = std::chrono::duration<double>(timeout).count();
  group_->timed_out(what_, sec);
  throw DistributedTimeoutError(
      str(what_, " did not finish within ", sec,
          " s: a peer rank may have died, raised an error, or called a different collective "
          "(every rank must call the same collectives in the same order). The process group is now "
          "broken; end the job (ProcessGroup::abort stops every rank). If the peers are only slow, "
          "raise the timeout (SNUG_DIST_TIMEOUT, in seconds)."));
}

// At exit: finalize MPI if snug initialized it. Groups still alive (static
// ones) get their timeout to finish what they started; a collective that
// cannot end means a peer is gone, and MPI_Finalize would wait for it
// forever, so the job is aborted instead.
void finalize_at_exit() {
  int fin = 0;
  MPI_Finalized(&fin);
  if (fin) return;
  std::vector<MpiGroup*> groups;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    groups.assign(live_groups().begin(), live_groups().end());
  }
  size_t pending = g_orphaned;
  for (MpiGroup* g : groups) {
    g->drain(std::chrono::steady_clock::now() + g->timeout());
    pending += g->pending_count();
  }
  if (pending > 0) {
    std::fprintf(stderr,
                 "snug: %zu MPI collective(s) still outstanding at exit (a peer rank is gone); aborting the job\n",
                 pending);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
}

}  // namespace

std::shared_ptr<ProcessGroup> make_mpi_group(std::chrono::milliseconds timeout) {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0, size = 1;
  {
    std::lock_guard<std::mutex> lock(mpi_mutex());
    ensure_mpi();
    SNUG_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
    // Errors come back as codes (thrown as DistributedError), not as MPI's
    // default of aborting the job from inside the call.
    MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
  }
  auto g = std::make_shared<MpiGroup>(comm, rank, size);
  if (timeout.count() > 0) g->set_timeout(timeout);
  return g;
}

}  // namespace snug::distributed
