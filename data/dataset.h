// SPDX-License-Identifier: MIT
// Datasets: a size and a way to get sample i. A sample is a short list of
// tensors (its fields, e.g. {image (1,28,28) f32, label () i64}); the
// DataLoader gets samples by index, collates them into a Batch and hands the
// batches out in sampler order (data/dataloader.h).
//
// NOTE [ Datasets are shared by worker threads ]
// A DataLoader with num_workers > 0 calls get() from several threads at once,
// so get() is const and must be safe to call concurrently. Tensors returned by
// get() may be views of the dataset's own tensors (TensorDataset does that):
// collate copies them into the batch, and nothing writes into them.
//
// NOTE [ Per-sample randomness ]
// Random transforms must not draw from a generator shared by workers: the
// order in which workers reach it would change the numbers with the number of
// workers. Instead the loader seeds sample_rng() from (seed, epoch, index)
// before each get(), so a sample's augmentation depends only on those three.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <snug/core/generator.h>
#include <snug/core/tensor.h>

namespace snug::data {

// The fields of one sample, in an order the dataset documents.
using Sample = std::vector<Tensor>;

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Sample i, 0 <= i < size(). Thread-safe (NOTE [ Datasets are shared by worker threads ]).
  virtual Sample get(int64_t i) const = 0;
};

// Field k of sample i is tensors[k][i]: every tensor has the same size(0).
// MNIST: TensorDataset({split.images, split.labels}) -> samples {(1,28,28) f32, () i64}.
class TensorDataset : public Dataset {
 public:
  explicit TensorDataset(std::vector<Tensor> tensors);
  int64_t size() const override { return n_; }
  Sample get(int64_t i) const override;  // views, no copy
  const std::vector<Tensor>& tensors() const { return tensors_; }

 private:
  std::vector<Tensor> tensors_;
  int64_t n_ = 0;
};

// ---- transforms -----------------------------------------------------------
// A transform maps a sample to a sample. They compose left to right.
using Transform = std::function<Sample(Sample)>;

Transform compose(std::vector<Transform> transforms);
// field := (field - mean) / std, in field's float dtype.
Transform normalize(double mean, double std, size_t field = 0);
// field := field converted to dtype (u8 pixels -> f32, say).
Transform to_dtype(DType dtype, size_t field = 0);
// field := field * scale (u8 -> f32 then scale 1/255 is compose(to_dtype, scale)).
Transform scale(double factor, size_t field = 0);
// With probability p, reverses field along dim (a horizontal flip of a (C,H,W)
// image is dim -1). Draws from sample_rng(), so it is reproducible.
Transform random_flip(int64_t dim = -1, double p = 0.5, size_t field = 0);

// get(i) = transform(base->get(i)).
class TransformDataset : public Dataset {
 public:
  TransformDataset(std::shared_ptr<const Dataset> base, Transform transform);
  int64_t size() const override { return base_->size(); }
  Sample get(int64_t i) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  Transform transform_;
};

// The generator random transforms draw from on this thread, seeded per sample
// (NOTE [ Per-sample randomness ]). Outside a loader it is seeded by
// seed_sample_rng or, if never seeded, by Generator's default seed.
Generator& sample_rng();
// Seeds this thread's sample_rng() for sample `index` of `epoch`.
void seed_sample_rng(uint64_t seed, int64_t epoch, int64_t index);

// A 64-bit mix of (seed, a, b): different inputs give unrelated outputs.
// Samplers and per-sample seeds use it so that no seed is a simple sum.
uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b = 0);

}  // namespace snug::data
