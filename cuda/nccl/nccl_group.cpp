// SPDX-License-Identifier: MIT
// The NCCL process group (distributed/nccl.h). Collectives run on a
// non-blocking stream of the group's own, ordered after whatever is already
// queued on the legacy default stream (where snug's kernels run) by an event;
// each Work records an event after its collective and wait() polls it, so a
// collective that never ends (a peer died) turns into DistributedTimeoutError
// after the timeout instead of a hang; the communicator is then aborted.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include <snug/cuda/check.h>
#include <snug/distributed/nccl.h>

namespace snug::distributed {

bool nccl_available() { return true; }

namespace {

#define SNUG_NCCL_CHECK(call, op)                                                                       \
  do {                                                                                                  \
    ncclResult_t rc_ = (call);                                                                          \
    if (rc_ != ncclSuccess) throw DistributedError(str(op, ": NCCL error: ", ncclGetErrorString(rc_))); \
  } while (0)

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::f32:
      return ncclFloat32;
    case DType::f16:
      return ncclFloat16;
    case DType::bf16:
      return ncclBfloat16;
    case DType::f64:
      return ncclFloat64;
    case DType::i8:
      return ncclInt8;
    case DType::u8:
    case DType::b8:
      return ncclUint8;
    case DType::i32:
      return ncclInt32;
    case DType::i64:
      return ncclInt64;
  }
  return ncclUint8;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum:
      return ncclSum;
    case ReduceOp::avg:
      return ncclAvg;
    case ReduceOp::max:
      return ncclMax;
    case ReduceOp::min:
      return ncclMin;
  }
  return ncclSum;
}

class NcclGroup;

class NcclWork : public Work {
 public:
  NcclWork(NcclGroup* g, std::string what, std::vector<Tensor> keep, cudaEvent_t ev)
      : group_(g), what_(std::move(what)), keep_(std::move(keep)), event_(ev) {}
  ~NcclWork() override { cudaEventDestroy(event_); }
  bool is_completed() override {
    if (done_) return true;
    cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    SNUG_CUDA_CHECK(e);
    done_ = true;
    keep_.clear();
    return true;
  }
  void wait() override;

 private:
  NcclGroup* group_;  // a Work must not outlive its group
  bool done_ = false;
  std::string what_;
  std::vector<Tensor> keep_;
  cudaEvent_t event_;
};

class NcclGroup : public ProcessGroup {
 public:
  NcclGroup(ncclComm_t comm, int rank, int size, int device) : ProcessGroup(rank, size), comm_(comm), device_(device) {
    SNUG_CUDA_CHECK(cudaSetDevice(device_));
    SNUG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  ~NcclGroup() override {
    cudaSetDevice(device_);
    if (broken()) {
      ncclCommAbort(comm_);  // ends what is stuck on the stream
    } else {
      cudaStreamSynchronize(stream_);  // collectives of dropped Works end before their buffers go
      ncclCommDestroy(comm_);
    }
    inflight_.clear();
    cudaStreamDestroy(stream_);
  }
  const char* backend() const override { return "nccl"; }
  Device device() const override { return Device(DeviceType::CUDA, device_); }

  std::shared_ptr<Work> all_reduce_async(const Tensor& t, ReduceOp op) override {
    check("all_reduce", t);
    if (t.numel() == 0) return completed_work();
    SNUG_CHECK(t.dtype() != DType::b8, DTypeError, "all_reduce over NCCL: bool tensors cannot be reduced");
    void* p = t.data_ptr();
    return launch(str("all_reduce(", reduce_op_name(op), ") of ", t.nbytes(), " bytes"), {t}, [&] {
      return ncclAllReduce(p, p, static_cast<size_t>(t.numel()), nccl_type(t.dtype()), nccl_op(op), comm_, stream_);
    });
  }
  std::shared_ptr<Work> broadcast_async(const Tensor& t, int root) override {
    check("broadcast", t);
    SNUG_CHECK(root >= 0 && root < size_, ValueError, "broadcast: root ", root, " is not a rank of this group of ",
               size_);
    if (t.numel() == 0) return completed_work();
    void* p = t.data_ptr();
    return launch(str("broadcast from rank ", root, " of ", t.nbytes(), " bytes"), {t},
                  [&] { return ncclBroadcast(p, p, t.nbytes(), ncclUint8, root, comm_, stream_); });
  }
  std::shared_ptr<Work> all_gather_async(const Tensor& in, const Tensor& out) override {
    check("all_gather", in);
    check("all_gather", out);
    Shape want = in.shape();
    want.insert(want.begin(), size_);
    SNUG_CHECK(out.shape() == want && out.dtype() == in.dtype(), ShapeError, "all_gather: out must be ",
               shape_str(want), " ", dtype_name(in.dtype()), ", got ", shape_str(out.shape()), " ",
               dtype_name(out.dtype()));
    if (in.numel() == 0) return completed_work();
    return launch(str("all_gather of ", in.nbytes(), " bytes per rank"), {in, out},
                  [&] { return ncclAllGather(in.data_ptr(), out.data_ptr(), in.nbytes(), ncclUint8, comm_, stream_); });
  }
  std::shared_ptr<Work> barrier_async() override {
    check_usable("barrier");
    // NCCL has no barrier: a one-element all-reduce every rank must join.
    if (!scratch_.defined()) scratch_ = zeros({1}, TensorOptions(DType::f32, Device(DeviceType::CUDA, device_)));
    void* p = scratch_.data_ptr();
    return launch("barrier", {scratch_}, [&] { return ncclAllReduce(p, p, 1, ncclFloat32, ncclSum, comm_, stream_); });
  }
  [[noreturn]] void abort(int code) override {
    std::fflush(stdout);
    std::fflush(stderr);
    ncclCommAbort(comm_);
    std::_Exit(code);
  }
  void timed_out(const std::string& what, double sec) { mark_broken(str(what, " timed out after ", sec, " s")); }
  void check_async_error(const std::string& what) {
    ncclResult_t async = ncclSuccess;
    ncclCommGetAsyncError(comm_, &async);
    if (async != ncclSuccess && async != ncclInProgress) {
      mark_broken(str("NCCL reported ", ncclGetErrorString(async)));
      throw DistributedError(str(what, ": NCCL error: ", ncclGetErrorString(async)));
    }
  }

 private:
  void check(const char* op, const Tensor& t) {
    check_tensor(op, t);
    SNUG_CHECK(t.device() == Device(DeviceType::CUDA, device_), DeviceError, op, " over NCCL: the tensor is on ",
               t.device().str(), ", this group's device is cuda:", device_);
  }
  template <class F>
  std::shared_ptr<Work> launch(std::string what, std::vector<Tensor> keep, F&& f) {
    SNUG_CUDA_CHECK(cudaSetDevice(device_));
    // Order after the kernels that produced the tensors (legacy default stream).
    cudaEvent_t ready = nullptr, done = nullptr;
    SNUG_CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    SNUG_CUDA_CHECK(cudaEventRecord(ready, cudaStreamLegacy));
    SNUG_CUDA_CHECK(cudaStreamWaitEvent(stream_, ready, 0));
    cudaEventDestroy(ready);
    what = str(what, " on rank ", rank_, " of ", size_);
    SNUG_NCCL_CHECK(f(), what);
    SNUG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    SNUG_CUDA_CHECK(cudaEventRecord(done, stream_));
    auto w = std::make_shared<NcclWork>(this, std::move(what), std::move(keep), done);
    // The group keeps every Work (and so its tensors) until it completes,
    // even one the caller drops without waiting.
    std::erase_if(inflight_, [](const std::shared_ptr<NcclWork>& x) { return x->is_completed(); });
    inflight_.push_back(w);
    return w;
  }

  ncclComm_t comm_;
  int device_;
  cudaStream_t stream_ = nullptr;
  Tensor scratch_;
  std::vector<std::shared_ptr<NcclWork>> inflight_;
};

void NcclWork::wait() {
  if (is_completed()) return;
  SNUG_CHECK(!group_->broken(), DistributedError, what_,
             ": the process group is broken (an earlier collective "
             "timed out or failed); end the job");
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  const auto timeout = group_->timeout();
  auto nap = std::chrono::microseconds(20);
  while (!is_completed()) {
    group_->check_async_error(what_);
    if (clock::now() - t0 >= timeout) {
      const double sec = std::chrono::duration<double>(timeout).count();
      group_->timed_out(what_, sec);
      throw DistributedTimeoutError(
          str(what_, " did not finish within ", sec,
              " s: a peer rank may have died, raised an error, or called a different collective. The process group "
              "is now broken (its NCCL communicator is aborted when it is destroyed); end the job. Raise "
              "SNUG_DIST_TIMEOUT (seconds) if the peers are only slow."));
    }
    std::this_thread::sleep_for(nap);
    nap = std::min(nap * 2, std::chrono::microseconds(1000));
  }
  // The result is read by kernels on the default stream; they are queued
  // after this host wait, so they see it.
}

// Rank 0 writes the id to `path` (temporary file + rename: readers never see
// half of it); the others wait for the file until the deadline.
void file_rendezvous(ncclUniqueId& id, int rank, const std::string& path, std::chrono::milliseconds timeout) {
  namespace fs = std::filesystem;
  if (rank == 0) {
    const std::string tmp = path + ".tmp";
    {
      std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
      SNUG_CHECK(f.good(), IOError, "make_nccl_group: cannot write the rendezvous file ", tmp);
      f.write(reinterpret_cast<const char*>(&id), sizeof id);
      SNUG_CHECK(f.good(), IOError, "make_nccl_group: cannot write the rendezvous file ", tmp);
    }
    fs::rename(tmp, path);
    return;
  }
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    std::error_code ec;
    if (fs::file_size(path, ec) == sizeof id && !ec) {
      std::ifstream f(path, std::ios::binary);
      f.read(reinterpret_cast<char*>(&id), sizeof id);
      if (f.gcount() == static_cast<std::streamsize>(sizeof id)) return;
    }
    SNUG_CHECK(std::chrono::steady_clock::now() < deadline, DistributedTimeoutError, "make_nccl_group: rank ", rank,
               " waited ", std::chrono::duration<double>(timeout).count(),
               " s for rank 0 to write the rendezvous file ", path);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> make_nccl_group(const NcclOptions& opt) {
  int rank = opt.rank, size = opt.size;
  if (opt.bootstrap) {
    rank = opt.bootstrap->rank();
    size = opt.bootstrap->size();
  } else if (rank < 0 || size < 0) {
    const WorldInfo w = detect_world();
    if (rank < 0) rank = w.rank;
    if (size < 0) size = w.size;
  }
  SNUG_CHECK(size >= 1 && rank >= 0 && rank < size, ValueError, "make_nccl_group: rank ", rank, " of ", size);
  const auto timeout = opt.timeout.count() > 0 ? opt.timeout : default_timeout();
  SNUG_CUDA_CHECK(cudaSetDevice(opt.device));
  ncclUniqueId id{};
  if (rank == 0) SNUG_NCCL_CHECK(ncclGetUniqueId(&id), "ncclGetUniqueId");
  if (size > 1) {
    if (opt.bootstrap) {
      Tensor buf = empty({static_cast<int64_t>(sizeof id)}, DType::u8);
      if (rank == 0) std::memcpy(buf.data_ptr(), &id, sizeof id);
      opt.bootstrap->broadcast(buf, 0);
      std::memcpy(&id, buf.data_ptr(), sizeof id);
    } else {
      SNUG_CHECK(!opt.rendezvous_file.empty(), ValueError, "make_nccl_group: a world of ", size,
                 " needs a bootstrap group (e.g. the MPI group) or a rendezvous_file");
      file_rendezvous(id, rank, opt.rendezvous_file, timeout);
    }
  }
  ncclComm_t comm = nullptr;
  SNUG_NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank), str("ncclCommInitRank (rank ", rank, " of ", size, ")"));
  auto g = std::make_shared<NcclGroup>(comm, rank, size, opt.device);
  g->set_timeout(timeout);
  return g;
}

}  // namespace snug::distributed
