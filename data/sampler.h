// SPDX-License-Identifier: MIT
// Samplers: which dataset indices an epoch visits and in what order; batch
// samplers: how those indices are grouped into batches.
//
// Every order is a pure function of (seed, epoch): no sampler keeps state
// between epochs, so a loader (or a resumed run, or rank r of a data-parallel
// job) can ask for any epoch's order and get the same answer. Random orders
// come from Philox (core/philox.h), so they are the same on every platform.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include <snug/data/dataset.h>

namespace snug::data {

// A uniformly random permutation of 0..n-1 determined by (seed, epoch)
// (Fisher-Yates on Philox draws).
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
  virtual int64_t size() const = 0;  // indices per epoch
};

// 0, 1, ..., n-1 every epoch.
class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

// A fresh permutation of 0..n-1 each epoch, from (seed, epoch).
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
  uint64_t seed_;
};

// Shard `rank` of `num_shards` (for data parallelism): every shard draws the
// same epoch order (seeded permutation or 0..n-1) and takes positions rank,
// rank + num_shards, ... . drop_last drops the tail so every shard has
// floor(n / num_shards) indices; otherwise the order is padded by repeating
// its start so every shard has ceil(n / num_shards) (some samples then appear
// twice per epoch across shards, as in PyTorch's DistributedSampler).
struct ShardOptions {
  int64_t num_shards = 1;
  int64_t rank = 0;
  bool shuffle = true;
  uint64_t seed = 0;
  bool drop_last = false;
};
class ShardedSampler : public Sampler {
 public:
  ShardedSampler(int64_t n, ShardOptions opt);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return per_shard_; }

 private:
  int64_t n_;
  ShardOptions opt_;
  int64_t per_shard_;
};

// Chunk-aware shuffling for data stored in chunks of `chunk_size`
// consecutive indices (the last may be shorter), e.g. ChunkedDataset: each
// epoch visits the chunks in a seeded order and, inside each chunk, its
// indices in a seeded order of their own; both depend on (seed, epoch) only.
// So consecutive positions stay within one chunk, and a loader keeps only
// the chunk it is in and the next resident. shuffle = false: 0..n-1.
class ChunkShuffleSampler : public Sampler {
 public:
  ChunkShuffleSampler(int64_t n, int64_t chunk_size, uint64_t seed, bool shuffle = true);
  std::vector<int64_t> indices(int64_t epoch) const override;
  int64_t size() const override { return n_; }
  int64_t chunk_size() const { return chunk_; }

 private:
  int64_t n_, chunk_;
  uint64_t seed_;
  bool shuffle_;
};

// ---- batch samplers ------------------------------------------------------------

class BatchSamplerBase {
 public:
  virtual ~BatchSamplerBase() = default;
  // Each inner vector is one batch of dataset indices.
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch) const = 0;
  virtual int64_t size() const = 0;  // batches per epoch
};

// Consecutive groups of batch_size from a sampler's order; the last batch is
// smaller unless drop_last drops it.
class BatchSampler : public BatchSamplerBase {
 public:
  BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last = false);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  int64_t size() const override;

 private:
  std::shared_ptr<const Sampler> sampler_;
  int64_t batch_size_;
  bool drop_last_;
};

// Groups variable-length sequences so that every batch, padded to its
// longest sequence, holds at most max_tokens tokens: count * max_length <=
// max_tokens. That bounds the activations of a batch, not just its sample
// count. The epoch order is shuffled (seeded) or 0..n-1; within each pool of
// pool_size consecutive indices the samples are sorted by length, so a batch
// holds similar lengths and little padding; the batches are then shuffled.
// pool_size 0 keeps the order as is (more padding, no sorting).
struct TokenBudgetOptions {
  int64_t max_tokens = 4096;
  bool shuffle = true;
  uint64_t seed = 0;
  int64_t pool_size = 1024;
  int64_t max_batch_size = 0;  // 0: no limit besides the budget
};
class TokenBudgetBatchSampler : public BatchSamplerBase {
 public:
  // lengths[i]: the length (tokens) of sample i; each in [1, max_tokens].
  TokenBudgetBatchSampler(std::vector<int64_t> lengths, TokenBudgetOptions opt);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  int64_t size() const override;  // batches of epoch 0 (the count may differ by an epoch or so)
  const std::vector<int64_t>& lengths() const { return lengths_; }

 private:
  std::vector<int64_t> lengths_;
  TokenBudgetOptions opt_;
};

// size(0) of `field` of every sample: the lengths a TokenBudgetBatchSampler needs.
std::vector<int64_t> sequence_lengths(const Dataset& ds, size_t field = 0);

}  // namespace snug::data
