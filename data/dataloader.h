// SPDX-License-Identifier: MIT
// DataLoader: batches of a Dataset in sampler order, made by worker threads
// ahead of the training loop.
//
//   auto ds = std::make_shared<data::TensorDataset>(std::vector{split.images, split.labels});
//   data::DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .seed = 1, .num_workers = 2});
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (data::Batch& b : loader) train_step(b[0] /* (64,1,28,28) */, b[1] /* (64) */);
//
// NOTE [ DataLoader order and determinism ]
// An epoch's batches are fixed before any worker starts: the batch sampler
// lists them from (seed, epoch). Workers take batches from a shared counter
// and the loader hands them out strictly in that list's order, so the batches
// (and, through NOTE [ Per-sample randomness ], their augmentations) are the
// same for 0, 1 or N workers. Each begin() runs the next epoch.
//
// NOTE [ DataLoader bounded prefetch ]
// At most prefetch_factor * num_workers batches exist at once beyond the one
// the caller holds: a worker may start batch j only while j < consumed +
// that bound. A slow training loop therefore never piles up batches.
//
// NOTE [ DataLoader shutdown ]
// An epoch ends when the iterator reaches the end, when it is destroyed
// halfway (a `break`, an exception in the loop body), when a worker fails, or
// when begin() starts another epoch. Workers check for that between samples,
// drop what they were making and (unless persistent_workers) are joined
// before the call that ended the epoch returns; the destructor always joins.
#pragma once
#include <cstdint>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include <snug/base/error.h>
#include <snug/data/collate.h>
#include <snug/data/dataset.h>
#include <snug/data/sampler.h>

namespace snug::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;             // a fresh seeded permutation every epoch
  uint64_t seed = 0;                // the sampler's and sample_rng()'s seed
  int num_workers = 0;              // 0: batches are made on the calling thread, when asked for
  int prefetch_factor = 2;          // batches in flight per worker (NOTE [ DataLoader bounded prefetch ])
  bool drop_last = false;           // drop a final batch smaller than batch_size
  bool persistent_workers = false;  // keep the threads between epochs
  // Stage batches in pinned (page-locked) host memory (memory/pinned.h)
  // for fast copies to a GPU. Accepted everywhere; a no-op without a GPU
  // (pin_memory_active() says which).
  bool pin_memory = false;
  CollateFn collate;  // empty: stack_collate
  // Optional: replaces shuffle (the sampler decides the order)...
  std::shared_ptr<const Sampler> sampler;
  // ...or replaces batch_size, shuffle, drop_last and sampler altogether
  // (e.g. TokenBudgetBatchSampler).
  std::shared_ptr<const BatchSamplerBase> batch_sampler;
};

// A failure while making a batch (in a worker or on the calling thread):
// the message names the sample (or, for collate, the batch) and carries the
// original message; original() rethrows the original exception.
class DataLoaderError : public Error {
 public:
  DataLoaderError(const std::string& msg, int64_t sample_index, int64_t batch_index, std::exception_ptr original)
      : Error(msg), sample_index_(sample_index), batch_index_(batch_index), original_(std::move(original)) {}
  int64_t sample_index() const { return sample_index_; }  // -1 when collate failed
  int64_t batch_index() const { return batch_index_; }    // position in the epoch
  std::exception_ptr original() const { return original_; }

 private:
  int64_t sample_index_, batch_index_;
  std::exception_ptr original_;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions opt = {});
  ~DataLoader();  // ends any epoch and joins every worker (NOTE [ DataLoader shutdown ])
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  struct End {};
  // Input iterator over one epoch's batches; move-only. Destroying it before
  // the end abandons the epoch cleanly.
  class Iterator {
   public:
    Iterator(Iterator&& o) noexcept;
    Iterator& operator=(Iterator&&) = delete;
    Iterator(const Iterator&) = delete;
    ~Iterator();
    Batch& operator*() { return current_; }
    Batch* operator->() { return &current_; }
    Iterator& operator++();
    bool operator==(End) const { return done_; }
    bool operator!=(End) const { return !done_; }

   private:
    friend class DataLoader;
    Iterator(DataLoader* loader, int64_t generation) : loader_(loader), generation_(generation) {}
    void fetch();
    DataLoader* loader_;
    int64_t generation_;
    Batch current_;
    bool done_ = false;
  };

  // Starts the next epoch (ending one still running) and returns its first batch.
  Iterator begin();
  End end() { return {}; }

  int64_t size() const;  // batches per epoch
  const Dataset& dataset() const { return *dataset_; }
  // The epoch the next begin() runs (starts at 0, +1 per begin()).
  void set_epoch(int64_t epoch);
  int64_t next_epoch() const { return next_epoch_; }
  // Whether batches really are in pinned memory (pin_memory and a GPU present).
  bool pin_memory_active() const { return pinned_; }
  // Worker threads alive now (0 between epochs unless persistent_workers).
  int live_workers() const;

 private:
  bool pinned_ = false;
  struct State;
  // Puts batch `next` of epoch generation `gen` in out; false at the end.
  bool next_batch(int64_t gen, Batch& out);
  void end_epoch(int64_t gen) noexcept;  // no-op if gen has already ended
  void worker_loop(int worker);
  void stop_workers() noexcept;
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions opt_;
  std::shared_ptr<const BatchSamplerBase> batches_;
  int64_t next_epoch_ = 0;
  std::unique_ptr<State> state_;
};

}  // namespace snug::data
