// SPDX-License-Identifier: MIT
#include <snug/data/dataset.h>

#include <snug/base/error.h>
#include <snug/core/raw_ops.h>

namespace snug::data {

TensorDataset::TensorDataset(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {
  SNUG_CHECK(!tensors_.empty(), ValueError, "TensorDataset: needs at least one tensor");
  for (size_t k = 0; k < tensors_.size(); ++k) {
    SNUG_CHECK(tensors_[k].defined() && tensors_[k].dim() >= 1, ValueError, "TensorDataset: tensor ", k,
               " must have at least one dim (samples along dim 0)");
    SNUG_CHECK(tensors_[k].size(0) == tensors_[0].size(0), ShapeError, "TensorDataset: tensor ", k, " has ",
               tensors_[k].size(0), " samples (shape ", shape_str(tensors_[k].shape()), ") but tensor 0 has ",
               tensors_[0].size(0), " (expected the same size(0))");
  }
  n_ = tensors_[0].size(0);
}

Sample TensorDataset::get(int64_t i) const {
  SNUG_CHECK(i >= 0 && i < n_, IndexError, "TensorDataset: index ", i, " out of range [0, ", n_, ")");
  Sample s;
  s.reserve(tensors_.size());
  // raw::select: a view without history, so worker threads never touch the tape.
  for (const Tensor& t : tensors_) s.push_back(raw::select(t, 0, i));
  return s;
}

TransformDataset::TransformDataset(std::shared_ptr<const Dataset> base, Transform transform)
    : base_(std::move(base)), transform_(std::move(transform)) {
  SNUG_CHECK(base_ != nullptr, ValueError, "TransformDataset: base dataset is null");
  SNUG_CHECK(bool(transform_), ValueError, "TransformDataset: transform is empty");
}

Sample TransformDataset::get(int64_t i) const { return transform_(base_->get(i)); }

// ---- transforms -------------------------------------------------------------

namespace {

Tensor& field_of(Sample& s, size_t field, const char* who) {
  SNUG_CHECK(field < s.size(), IndexError, who, ": the sample has ", s.size(), " fields, no field ", field);
  return s[field];
}

}  // namespace

Transform compose(std::vector<Transform> transforms) {
  for (size_t k = 0; k < transforms.size(); ++k)
    SNUG_CHECK(bool(transforms[k]), ValueError, "compose: transform ", k, " is empty");
  return [ts = std::move(transforms)](Sample s) {
    for (const Transform& t : ts) s = t(std::move(s));
    return s;
  };
}

Transform normalize(double mean, double std, size_t field) {
  SNUG_CHECK(std > 0, ValueError, "normalize: std must be positive, got ", std);
  return [=](Sample s) {
    Tensor& x = field_of(s, field, "normalize");
    SNUG_CHECK(x.is_floating_point(), DTypeError, "normalize: field ", field, " is ", dtype_name(x.dtype()),
               "; convert it first (to_dtype(DType::f32))");
    x = raw::binary_scalar(BinaryOp::mul, raw::binary_scalar(BinaryOp::sub, x, mean), 1.0 / std);
    return s;
  };
}

Transform to_dtype(DType dtype, size_t field) {
  return [=](Sample s) {
    Tensor& x = field_of(s, field, "to_dtype");
    x = raw::to_dtype(x, dtype);
    return s;
  };
}

Transform scale(double factor, size_t field) {
  return [=](Sample s) {
    Tensor& x = field_of(s, field, "scale");
    x = raw::binary_scalar(BinaryOp::mul, x, factor);
    return s;
  };
}

Transform random_flip(int64_t dim, double p, size_t field) {
  SNUG_CHECK(p >= 0 && p <= 1, ValueError, "random_flip: p must be in [0, 1], got ", p);
  return [=](Sample s) {
    Tensor& x = field_of(s, field, "random_flip");
    // One uniform draw per sample from the per-sample generator.
    PhiloxState st = sample_rng().reserve(1);
    if (double(uniform_at(st, 0)) < p) {
      const int64_t d = dim < 0 ? dim + x.dim() : dim;
      SNUG_CHECK(d >= 0 && d < x.dim(), IndexError, "random_flip: dim ", dim, " out of range for shape ",
                 shape_str(x.shape()));
      const int64_t n = x.size(d);
      Tensor rev = empty({n}, DType::i64);
      int64_t* r = rev.data<int64_t>();
      for (int64_t i = 0; i < n; ++i) r[i] = n - 1 - i;
      x = raw::index_select(x, d, rev);
    }
    return s;
  };
}

// ---- per-sample randomness ---------------------------------------------------

uint64_t mix_seed(uint64_t seed, uint64_t a, uint64_t b) {
  // splitmix64 finalizer over each input in turn: cheap, and a one-bit change
  // anywhere flips about half of the output bits.
  auto fmix = [](uint64_t z) {
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  };
  return fmix(fmix(fmix(seed) ^ a) ^ b);
}

Generator& sample_rng() {
  thread_local Generator gen;
  return gen;
}

void seed_sample_rng(uint64_t seed, int64_t epoch, int64_t index) {
  sample_rng().manual_seed(mix_seed(seed, uint64_t(epoch), uint64_t(index)));
}

}  // namespace snug::data
