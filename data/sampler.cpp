// SPDX-License-Identifier: MIT
#include <snug/data/sampler.h>

#include <algorithm>
#include <numeric>

#include <snug/base/error.h>
#include <snug/core/philox.h>

namespace snug::data {

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  SNUG_CHECK(n >= 0, ValueError, "permutation: n must be >= 0, got ", n);
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  const PhiloxState st{mix_seed(seed, uint64_t(epoch)), 0};
  uint64_t w = 0;  // Philox word counter
  for (int64_t i = n - 1; i > 0; --i) {
    // 64 random bits scaled to [0, i] by a multiply-high: the bias is below
    // i / 2^64, far too small to matter for any dataset.
    const uint64_t r = (uint64_t(philox_word(st, w)) << 32) | philox_word(st, w + 1);
    w += 2;
    const auto j = int64_t((unsigned __int128)r * uint64_t(i + 1) >> 64);
    std::swap(p[size_t(i)], p[size_t(j)]);
  }
  return p;
}

SequentialSampler::SequentialSampler(int64_t n) : n_(n) {
  SNUG_CHECK(n >= 0, ValueError, "SequentialSampler: n must be >= 0, got ", n);
}

std::vector<int64_t> SequentialSampler::indices(int64_t) const {
  std::vector<int64_t> v(static_cast<size_t>(n_));
  std::iota(v.begin(), v.end(), int64_t(0));
  return v;
}

RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(n), seed_(seed) {
  SNUG_CHECK(n >= 0, ValueError, "RandomSampler: n must be >= 0, got ", n);
}

std::vector<int64_t> RandomSampler::indices(int64_t epoch) const { return permutation(n_, seed_, epoch); }

ShardedSampler::ShardedSampler(int64_t n, ShardOptions opt) : n_(n), opt_(opt) {
  SNUG_CHECK(n >= 0, ValueError, "ShardedSampler: n must be >= 0, got ", n);
  SNUG_CHECK(opt.num_shards >= 1, ValueError, "ShardedSampler: num_shards must be >= 1, got ", opt.num_shards);
  SNUG_CHECK(opt.rank >= 0 && opt.rank < opt.num_shards, ValueError, "ShardedSampler: rank ", opt.rank,
             " out of range [0, ", opt.num_shards, ")");
  per_shard_ = opt.drop_last ? n / opt.num_shards : (n + opt.num_shards - 1) / opt.num_shards;
}

std::vector<int64_t> ShardedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> order;
  if (opt_.shuffle) {
    order = permutation(n_, opt_.seed, epoch);
  } else {
    order.resize(size_t(n_));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  const int64_t total = per_shard_ * opt_.num_shards;
  // Padding repeats the order's start (n_ > 0 here whenever total > n_).
  for (int64_t k = n_; k < total; ++k) order.push_back(order[size_t(k % n_)]);
  std::vector<int64_t> mine;
  mine.reserve(size_t(per_shard_));
  for (int64_t k = opt_.rank; k < total; k += opt_.num_shards) mine.push_back(order[size_t(k)]);
  return mine;
}

ChunkShuffleSampler::ChunkShuffleSampler(int64_t n, int64_t chunk_size, uint64_t seed, bool shuffle)
    : n_(n), chunk_(chunk_size), seed_(seed), shuffle_(shuffle) {
  SNUG_CHECK(n >= 0 && chunk_size >= 1, ValueError, "ChunkShuffleSampler: expected n >= 0 and chunk_size >= 1, got ", n,
             " and ", chunk_size);
}

std::vector<int64_t> ChunkShuffleSampler::indices(int64_t epoch) const {
  std::vector<int64_t> out;
  out.reserve(size_t(n_));
  if (!shuffle_) {
    for (int64_t i = 0; i < n_; ++i) out.push_back(i);
    return out;
  }
  const int64_t chunks = (n_ + chunk_ - 1) / chunk_;
  // Separate streams for the chunk order and for each chunk's inner order,
  // so neither is a shifted copy of the other.
  for (int64_t c : permutation(chunks, mix_seed(seed_, 0xc4u), epoch)) {
    const int64_t first = c * chunk_, len = std::min(chunk_, n_ - first);
    for (int64_t k : permutation(len, mix_seed(seed_, 0x1eu, uint64_t(c)), epoch)) out.push_back(first + k);
  }
  return out;
}

// ---- batch samplers ----------------------------------------------------------------

BatchSampler::BatchSampler(std::shared_ptr<const Sampler> sampler, int64_t batch_size, bool drop_last)
    : sampler_(std::move(sampler)), batch_size_(batch_size), drop_last_(drop_last) {
  SNUG_CHECK(sampler_ != nullptr, ValueError, "BatchSampler: sampler is null");
  SNUG_CHECK(batch_size >= 1, ValueError, "BatchSampler: batch_size must be >= 1, got ", batch_size);
}

std::vector<std::vector<int64_t>> BatchSampler::batches(int64_t epoch) const {
  const std::vector<int64_t> order = sampler_->indices(epoch);
  std::vector<std::vector<int64_t>> out;
  for (size_t s = 0; s < order.size(); s += size_t(batch_size_)) {
    const size_t e = std::min(order.size(), s + size_t(batch_size_));
    if (drop_last_ && e - s < size_t(batch_size_)) break;
    out.emplace_back(order.begin() + std::ptrdiff_t(s), order.begin() + std::ptrdiff_t(e));
  }
  return out;
}

int64_t BatchSampler::size() const {
  const int64_t n = sampler_->size();
  return drop_last_ ? n / batch_size_ : (n + batch_size_ - 1) / batch_size_;
}

TokenBudgetBatchSampler::TokenBudgetBatchSampler(std::vector<int64_t> lengths, TokenBudgetOptions opt)
    : lengths_(std::move(lengths)), opt_(opt) {
  SNUG_CHECK(opt.max_tokens >= 1, ValueError, "TokenBudgetBatchSampler: max_tokens must be >= 1, got ", opt.max_tokens);
  SNUG_CHECK(opt.pool_size >= 0 && opt.max_batch_size >= 0, ValueError,
             "TokenBudgetBatchSampler: pool_size and max_batch_size must be >= 0");
  for (size_t i = 0; i < lengths_.size(); ++i) {
    // A sample over the budget cannot be batched without truncating it, and
    // truncating silently would hide data; say so instead.
    SNUG_CHECK(lengths_[i] >= 1 && lengths_[i] <= opt.max_tokens, ValueError, "TokenBudgetBatchSampler: sample ", i,
               " has length ", lengths_[i], " (expected 1..max_tokens = ", opt.max_tokens, ")");
  }
}

std::vector<std::vector<int64_t>> TokenBudgetBatchSampler::batches(int64_t epoch) const {
  const auto n = int64_t(lengths_.size());
  std::vector<int64_t> order;
  if (opt_.shuffle) {
    order = permutation(n, opt_.seed, epoch);
  } else {
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), int64_t(0));
  }
  if (opt_.pool_size > 0) {
    for (int64_t s = 0; s < n; s += opt_.pool_size) {
      auto b = order.begin() + s, e = order.begin() + std::min(n, s + opt_.pool_size);
      std::stable_sort(b, e, [&](int64_t x, int64_t y) { return lengths_[size_t(x)] < lengths_[size_t(y)]; });
    }
  }
  std::vector<std::vector<int64_t>> out;
  std::vector<int64_t> cur;
  int64_t longest = 0;
  for (int64_t i : order) {
    const int64_t len = lengths_[size_t(i)];
    const int64_t grown = std::max(longest, len);
    const bool full = opt_.max_batch_size > 0 && int64_t(cur.size()) >= opt_.max_batch_size;
    if (!cur.empty() && (full || grown * int64_t(cur.size() + 1) > opt_.max_tokens)) {
      out.push_back(std::move(cur));
      cur.clear();
      longest = 0;
    }
    cur.push_back(i);
    longest = std::max(longest, len);
  }
  if (!cur.empty()) out.push_back(std::move(cur));
  if (opt_.shuffle) {
    // Sorted pools make batches run short to long; shuffle them so training
    // does not see lengths in order.
    const std::vector<int64_t> p = permutation(int64_t(out.size()), mix_seed(opt_.seed, 0xba7c4), epoch);
    std::vector<std::vector<int64_t>> shuffled(out.size());
    for (size_t k = 0; k < out.size(); ++k) shuffled[k] = std::move(out[size_t(p[k])]);
    out = std::move(shuffled);
  }
  return out;
}

int64_t TokenBudgetBatchSampler::size() const { return int64_t(batches(0).size()); }

std::vector<int64_t> sequence_lengths(const Dataset& ds, size_t field) {
  std::vector<int64_t> out(size_t(ds.size()));
  for (int64_t i = 0; i < ds.size(); ++i) {
    Sample s = ds.get(i);
    SNUG_CHECK(field < s.size() && s[field].dim() >= 1, ValueError, "sequence_lengths: sample ", i, " has no field ",
               field, " with at least one dim");
    out[size_t(i)] = s[field].size(0);
  }
  return out;
}

}  // namespace snug::data
