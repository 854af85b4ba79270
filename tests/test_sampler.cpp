// SPDX-License-Identifier: MIT
// Samplers: seeded orders are permutations, reproducible, different per
// epoch; shards partition an epoch; batch samplers cover every index once;
// token-budget batches stay within the budget.
#include <doctest/doctest.h>

#include <algorithm>
#include <set>

#include <snug/data/sampler.h>

using namespace snug;
using namespace snug::data;

namespace {
std::vector<int64_t> sorted(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}
std::vector<int64_t> iota(int64_t n) {
  std::vector<int64_t> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = i;
  return v;
}
}  // namespace

TEST_CASE("sequential and random samplers") {
  CHECK(SequentialSampler(5).indices(3) == iota(5));
  RandomSampler r(1000, 7);
  std::vector<int64_t> e0 = r.indices(0), e1 = r.indices(1);
  CHECK(sorted(e0) == iota(1000));
  CHECK(sorted(e1) == iota(1000));
  CHECK(e0 != e1);
  CHECK(e0 != iota(1000));
  CHECK(r.indices(0) == e0);                       // a pure function of (seed, epoch)
  CHECK(RandomSampler(1000, 8).indices(0) != e0);  // and of the seed
  CHECK(permutation(0, 1, 0).empty());
  CHECK(permutation(1, 1, 0) == std::vector<int64_t>{0});
  // Roughly uniform: over many epochs, element 0 lands in each of 4 places about equally often.
  std::vector<int> where(4, 0);
  for (int e = 0; e < 4000; ++e) {
    auto p = permutation(4, 99, e);
    where[size_t(std::find(p.begin(), p.end(), 0) - p.begin())]++;
  }
  for (int c : where) CHECK(std::abs(c - 1000) < 150);
  CHECK_THROWS_AS(RandomSampler(-1, 0), ValueError);
}

TEST_CASE("sharded sampler: shards partition the epoch") {
  for (bool drop_last : {false, true}) {
    CAPTURE(drop_last);
    const int64_t n = 103, R = 4;
    std::vector<int64_t> all;
    for (int64_t rank = 0; rank < R; ++rank) {
      ShardedSampler s(n, {.num_shards = R, .rank = rank, .seed = 5, .drop_last = drop_last});
      std::vector<int64_t> mine = s.indices(2);
      CHECK(int64_t(mine.size()) == s.size());
      CHECK(s.size() == (drop_last ? 25 : 26));
      all.insert(all.end(), mine.begin(), mine.end());
    }
    std::set<int64_t> distinct(all.begin(), all.end());
    if (drop_last) {
      CHECK(all.size() == 100);
      CHECK(distinct.size() == 100);  // no repeats
    } else {
      CHECK(all.size() == 104);
      CHECK(distinct.size() == 103);  // every sample, one repeated as padding
    }
  }
  // Ranks agree on the epoch order: shard 0 of epoch 0 differs from epoch 1.
  ShardedSampler s0(50, {.num_shards = 2, .rank = 0, .seed = 1});
  CHECK(s0.indices(0) != s0.indices(1));
  ShardedSampler seq(6, {.num_shards = 2, .rank = 1, .shuffle = false});
  CHECK(seq.indices(0) == std::vector<int64_t>{1, 3, 5});
  CHECK_THROWS_AS(ShardedSampler(10, {.num_shards = 2, .rank = 2}), ValueError);
}

TEST_CASE("batch sampler groups a sampler's order") {
  auto s = std::make_shared<SequentialSampler>(10);
  BatchSampler b(s, 4);
  auto bs = b.batches(0);
  REQUIRE(bs.size() == 3);
  CHECK(bs[0] == std::vector<int64_t>{0, 1, 2, 3});
  CHECK(bs[2] == std::vector<int64_t>{8, 9});
  CHECK(b.size() == 3);
  BatchSampler d(s, 4, true);
  CHECK(d.batches(0).size() == 2);
  CHECK(d.size() == 2);
  CHECK_THROWS_AS(BatchSampler(s, 0), ValueError);
}

TEST_CASE("token-budget batch sampler: within budget, every index once, less padding than random") {
  std::vector<int64_t> lengths;
  for (int i = 0; i < 500; ++i) lengths.push_back(1 + (i * 37) % 200);
  const int64_t budget = 1024;
  TokenBudgetBatchSampler s(lengths, {.max_tokens = budget, .seed = 11, .pool_size = 100});
  auto bs = s.batches(0);
  std::vector<int64_t> all;
  int64_t padded = 0;
  for (auto& b : bs) {
    int64_t longest = 0;
    for (int64_t i : b) longest = std::max(longest, lengths[size_t(i)]);
    CHECK(longest * int64_t(b.size()) <= budget);
    padded += longest * int64_t(b.size());
    all.insert(all.end(), b.begin(), b.end());
  }
  CHECK(sorted(all) == iota(500));
  CHECK(s.batches(0) == bs);  // reproducible
  CHECK(s.batches(1) != bs);  // and new each epoch
  // Without length sorting, the same budget wastes more on padding.
  TokenBudgetBatchSampler unsorted(lengths, {.max_tokens = budget, .seed = 11, .pool_size = 0});
  int64_t padded_unsorted = 0;
  for (auto& b : unsorted.batches(0)) {
    int64_t longest = 0;
    for (int64_t i : b) longest = std::max(longest, lengths[size_t(i)]);
    padded_unsorted += longest * int64_t(b.size());
  }
  CHECK(padded < padded_unsorted);
  // max_batch_size caps the count.
  TokenBudgetBatchSampler capped(std::vector<int64_t>(50, 1), {.max_tokens = 100, .max_batch_size = 8});
  for (auto& b : capped.batches(0)) CHECK(b.size() <= 8);
  // A sequence longer than the budget is an error, not a silent truncation.
  CHECK_THROWS_WITH_AS(TokenBudgetBatchSampler({3, 5000}, {.max_tokens = 4096}),
                       doctest::Contains("sample 1 has length 5000"), ValueError);
}
