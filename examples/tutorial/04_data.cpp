// SPDX-License-Identifier: MIT
// Tutorial chapter 4 (docs/tutorial/04-data.md): datasets, the DataLoader
// (batches, shuffling, seeds, worker threads) and a padding collate for
// variable-length sequences, all on generated data. Exits 1 if a check fails.
#include <snug/snug.h>

#include <iostream>

using namespace snug;

// Sample i: a sequence of 3 to 12 tokens in [0, 10) and a label, 1 when most
// tokens are below 5. get() is const and makes the sample from i alone, so
// worker threads may call it at once (NOTE [ Datasets are shared by worker threads ]).
class TokenSequences : public data::Dataset {
 public:
  explicit TokenSequences(int64_t n) : n_(n) {}
  int64_t size() const override { return n_; }
  data::Sample get(int64_t i) const override {
    Generator gen(data::mix_seed(2024, static_cast<uint64_t>(i)));  // a generator of its own
    const int64_t len = 3 + i % 10;
    Tensor tokens = randint(0, 10, {len}, kInt64, &gen);                 // (len) i64
    Tensor label = ((tokens < 5).to(kFloat32).mean() > 0.5).to(kInt64);  // () i64
    return {tokens, label};
  }

 private:
  int64_t n_;
};

// The dataset indices of every batch of one epoch.
std::vector<std::vector<int64_t>> epoch_order(data::DataLoader& loader) {
  std::vector<std::vector<int64_t>> order;
  for (data::Batch& b : loader) order.push_back(b.indices);
  return order;
}

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
    failures += ok ? 0 : 1;
  };

  // ---- fixed-size samples: TensorDataset and the default (stacking) collate ----
  auto points = std::make_shared<data::TensorDataset>(std::vector<Tensor>{randn({10, 3}), arange(10)});
  data::DataLoader plain(points, {.batch_size = 4});
  for (data::Batch& b : plain)
    std::cout << "batch of " << b.size() << ": x " << shape_str(b[0].shape()) << ", y " << b[1] << "\n";
  expect(plain.size() == 3, "10 samples in batches of 4 make 3 batches (the last one of 2)");

  // ---- shuffling is a seeded permutation per epoch, whatever the workers ----
  auto seqs = std::make_shared<TokenSequences>(512);
  auto padded = data::pad_collate({.pad_values = {0, 0}});
  data::DataLoader one(seqs, {.batch_size = 32, .shuffle = true, .seed = 7, .collate = padded});
  data::DataLoader four(seqs, {.batch_size = 32, .shuffle = true, .seed = 7, .num_workers = 4, .collate = padded});
  const auto first_epoch = epoch_order(one);
  expect(first_epoch == epoch_order(four), "0 and 4 workers give the same batches in the same order");
  expect(first_epoch != epoch_order(one), "the next epoch is another permutation");
  data::DataLoader other_seed(seqs, {.batch_size = 32, .shuffle = true, .seed = 8, .collate = padded});
  expect(first_epoch != epoch_order(other_seed), "another seed, another order");

  // ---- variable lengths: pad_collate pads to the longest and says where the padding is ----
  data::Batch b = *one.begin();
  std::cout << "tokens " << shape_str(b[0].shape()) << "; the first rows, '.' at padding:\n";
  for (int64_t r = 0; r < 4; ++r) {
    const auto tok = b[0].select(0, r).to_vector<int64_t>();
    const auto pad = b.padding_mask.select(0, r).to_vector<int64_t>();
    std::cout << "  length " << b.lengths.select(0, r).item<int64_t>() << ":\t";
    for (size_t t = 0; t < tok.size(); ++t) std::cout << (t ? " " : "") << (pad[t] ? "." : std::to_string(tok[t]));
    std::cout << "\n";
  }
  const int64_t longest = amax(b.lengths).item<int64_t>();
  expect(b[0].size(1) == longest, "the batch is as long as its longest sequence");
  expect(b.padding_mask.numel() - b.padding_mask.to(kInt64).sum().item<int64_t>() == b.lengths.sum().item<int64_t>(),
         "the padding mask is false exactly at the real tokens");

  // ---- a model that uses the mask: a masked mean of token embeddings ----
  manual_seed(0);
  nn::Embedding embed(10, 8);
  nn::Linear head(8, 2);
  std::vector<Tensor> params = embed.parameters();
  for (const Tensor& p : head.parameters()) params.push_back(p);
  nn::optim::AdamW opt(params, {.lr = 0.05});
  double first_loss = 0, last_loss = 0;
  for (int epoch = 0; epoch < 3; ++epoch) {
    double sum = 0;
    for (data::Batch& batch : four) {                       // worker threads make the batches ahead
      Tensor mask = 1.0 - batch.padding_mask.to(kFloat32).unsqueeze(-1);  // (B, L, 1): padding counts 0
      Tensor pooled = (embed.forward(batch[0]) * mask).sum({1}) / batch.lengths.to(kFloat32).unsqueeze(-1);
      Tensor loss = nn::functional::cross_entropy(head.forward(pooled), batch[1]);
      opt.zero_grad();
      loss.backward();
      opt.step();
      sum += loss.item();
    }
    std::cout << "epoch " << epoch << " mean loss " << sum / four.size() << "\n";
    (epoch == 0 ? first_loss : last_loss) = sum / four.size();
  }
  expect(last_loss < 0.75 * first_loss, "the loss fell by a quarter over three epochs");

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}
