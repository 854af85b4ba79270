// SPDX-License-Identifier: MIT
// The corpus: characters as tokens, the 90/10 split, and the batches drawn from it.
#include <fstream>
#include <set>
#include <sstream>

#include <snug/core/raw_ops.h>
#include <snug/data/sampler.h>

#include "charlm/charlm.h"

namespace charlm {

Corpus load_corpus(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SNUG_CHECK(in.good(), IOError, "charlm: cannot open data file \"", path, "\" (pass --data FILE)");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string text = ss.str();
  SNUG_CHECK(text.size() > 1000, IOError, "charlm: data file \"", path, "\" has only ", text.size(),
             " bytes; need a text corpus of at least 1000 characters");
  Corpus c;
  std::set<char> chars(text.begin(), text.end());
  c.itos.assign(chars.begin(), chars.end());
  for (size_t i = 0; i < c.itos.size(); ++i) c.stoi[c.itos[i]] = static_cast<int64_t>(i);
  size_t n_train = text.size() * 9 / 10;
  for (size_t i = 0; i < text.size(); ++i) (i < n_train ? c.train : c.val).push_back(c.stoi[text[i]]);
  return c;
}

TrainWindows::TrainWindows(const std::vector<int64_t>& tokens, int64_t block, int64_t batch)
    : tokens_(tokens), block_(block), batch_(batch) {
  SNUG_CHECK(static_cast<int64_t>(tokens.size()) > block + 1, ValueError, "charlm: the training split has ",
             tokens.size(), " tokens, too few for block size ", block);
}

data::Sample TrainWindows::get(int64_t) const {
  const int64_t hi = static_cast<int64_t>(tokens_.size()) - block_ - 1;
  const int64_t off = randint(0, hi, {1}, DType::i64, &data::sample_rng()).item<int64_t>();
  std::vector<int64_t> x(tokens_.begin() + off, tokens_.begin() + off + block_);
  std::vector<int64_t> y(tokens_.begin() + off + 1, tokens_.begin() + off + block_ + 1);
  return {from_vector(x), from_vector(y)};
}

std::pair<Tensor, Tensor> get_batch(const std::vector<int64_t>& data, int64_t B, int64_t T, Generator& gen,
                                    Device device) {
  int64_t hi = static_cast<int64_t>(data.size()) - T - 1;
  SNUG_CHECK(hi > 0, ValueError, "charlm: the split has ", data.size(), " tokens, too few for block size ", T);
  std::vector<int64_t> offs = randint(0, hi, {B}, DType::i64, &gen).to_vector<int64_t>();
  std::vector<int64_t> xs(B * T), ys(B * T);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < T; ++t) {
      xs[b * T + t] = data[offs[b] + t];
      ys[b * T + t] = data[offs[b] + t + 1];
    }
  return {from_vector(xs, {B, T}).to(device), from_vector(ys, {B, T}).to(device)};
}

data::DataLoader train_loader(const Corpus& corpus, const Setup& st) {
  auto windows = std::make_shared<TrainWindows>(corpus.train, st.T, st.B * st.world);
  auto shard = std::make_shared<data::ShardedSampler>(
      st.B * st.world, data::ShardOptions{.num_shards = st.world, .rank = st.rank, .shuffle = false});
  // On a GPU the batches are staged in pinned memory for the asynchronous copy (data/device_prefetch.h).
  return data::DataLoader(
      windows, {.batch_size = st.B, .seed = st.seed + 1000, .pin_memory = st.device.is_cuda(), .sampler = shard});
}

}  // namespace charlm
