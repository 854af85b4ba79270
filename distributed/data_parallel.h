// SPDX-License-Identifier: MIT
// DataParallel: every rank holds a full copy of the model and trains on its
// own part of each batch; gradients are averaged across ranks during
// backward, so every rank's optimizer takes the same step (PyTorch's
// DistributedDataParallel).
//
//   auto pg = distributed::init_process_group();       // mpirun/srun, or one process
//   distributed::DataParallel dp(model, pg);           // broadcasts rank 0's parameters
//   loss = model.loss(x_of_this_rank, y_of_this_rank);
//   loss.backward();                                   // gradients averaged on return
//   opt.step();
//
// NOTE [ Gradient buckets ]
// Parameters are grouped, in reverse registration order (roughly the order
// their gradients are ready in backward), into buckets of about
// bucket_bytes (25 MiB by default) of one dtype and device. A
// post-accumulate hook on each parameter marks it ready; when every
// parameter of a bucket is ready, its gradients are copied into the bucket's
// flat buffer and an all-reduce (avg) of that buffer starts, non-blocking,
// while backward goes on computing the earlier layers' gradients. Buckets
// start in bucket order on every rank (a bucket that is ready early waits
// for the ones before it), which keeps the collectives in the same order
// everywhere. When the last parameter is ready the wrapper waits for every
// bucket and copies the averages back into .grad, so gradients are in sync
// when backward returns. f16/bf16 gradients are reduced in f32 buffers.
//
// Accumulation: inside a no_sync() scope the hooks do nothing and gradients
// just add up locally; the backward after the scope reduces the sum (the
// average is linear, so reducing once per step gives the same result).
// Mixed precision: the scaled gradients are reduced, then GradScaler
// unscales them as usual (an inf on any rank reaches every rank, so every
// rank skips the same steps). Parameters unused in a step never become
// ready: call finish_gradient_sync() before the optimizer step (it reduces
// their gradients as zeros); it is a no-op when the sync already ended.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <snug/distributed/process_group.h>
#include <snug/nn/module.h>

namespace snug::distributed {

struct DataParallelOptions {
  int64_t bucket_bytes = 25 * 1024 * 1024;
  bool broadcast_buffers = true;  // buffers (e.g. BatchNorm's running stats) too, at construction
};

class DataParallel {
 public:
  // The module stays the caller's (state_dict names are unchanged, so
  // checkpoints are interchangeable with a single-process run). Collective:
  // every rank constructs it with the same model; checks that the ranks'
  // parameter shapes agree and copies rank 0's parameters and buffers to all.
  DataParallel(nn::Module& module, std::shared_ptr<ProcessGroup> group, DataParallelOptions opt = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  nn::Module& module() const { return module_; }
  ProcessGroup& group() const { return *group_; }
  int rank() const { return group_->rank(); }
  int world_size() const { return group_->size(); }

  // Skips gradient synchronization while alive (accumulation micro-steps).
  class NoSync {
   public:
    explicit NoSync(DataParallel& dp) : dp_(&dp), prev_(dp.sync_) { dp.sync_ = false; }
    ~NoSync() {
      if (dp_) dp_->sync_ = prev_;
    }
    NoSync(NoSync&& o) noexcept : dp_(o.dp_), prev_(o.prev_) { o.dp_ = nullptr; }
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DataParallel* dp_;
    bool prev_;
  };
  [[nodiscard]] NoSync no_sync() { return NoSync(*this); }
  bool sync_enabled() const { return sync_; }

  // Starts what has not started (unused parameters count as zero), waits for
  // every bucket and writes the averages into .grad. No-op when nothing is
  // pending. Throws DistributedTimeoutError (NOTE [ Collective timeouts ]).
  void finish_gradient_sync();

  // The buckets: indices into the parameters list, in launch order.
  const std::vector<std::vector<size_t>>& buckets() const { return bucket_params_; }
  const std::vector<Tensor>& parameters() const { return params_; }

  // Over all syncs so far: buckets reduced, bytes reduced, buckets already
  // finished when the last gradient arrived (communication fully hidden),
  // and the time spent waiting for the rest (not hidden).
  struct Stats {
    int64_t syncs = 0, buckets_reduced = 0, bytes_reduced = 0, buckets_done_early = 0;
    double wait_ms = 0;
  };
  const Stats& stats() const { return stats_; }

 private:
  struct Bucket;
  void on_ready(size_t param);
  void launch_ready_buckets();
  void launch(Bucket& b);

  nn::Module& module_;
  std::shared_ptr<ProcessGroup> group_;
  DataParallelOptions opt_;
  std::vector<Tensor> params_;
  std::vector<std::string> names_;
  std::vector<uint64_t> hook_ids_;
  std::vector<std::vector<size_t>> bucket_params_;
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<size_t> bucket_of_;  // param -> bucket
  std::vector<char> ready_;        // param -> ready in this sync
  size_t next_launch_ = 0, ready_count_ = 0;
  bool sync_ = true;
  Stats stats_;
};

}  // namespace snug::distributed
