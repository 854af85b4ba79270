// SPDX-License-Identifier: MIT
// Collate: turn a list of samples into one Batch. The DataLoader runs the
// collate function on its worker threads, so it must be thread-safe (both
// given here are: they only read the samples and write fresh tensors).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include <snug/data/dataset.h>

namespace snug::data {

struct Batch {
  // Field k of every sample, combined: stack gives (B, ...field shape);
  // pad_collate gives (B, L, ...) for variable-length fields.
  std::vector<Tensor> fields;
  // pad_collate only (undefined after stack_collate), for its length_field:
  Tensor lengths;       // (B) i64: each sample's length before padding
  // (B, L) bool: true at padding, false at real positions -- the attention
  // masks' convention (NOTE [ Attention masks ] in core/backend.h), so it goes
  // to MultiheadAttention and TransformerEncoder as their key_padding_mask.
  Tensor padding_mask;
  // The dataset index of each sample, in batch order (set by the DataLoader).
  std::vector<int64_t> indices;

  Tensor& operator[](size_t k) { return fields.at(k); }
  const Tensor& operator[](size_t k) const { return fields.at(k); }
  int64_t size() const { return fields.empty() ? 0 : fields[0].size(0); }  // B
  // The batch on `device`: every field, lengths and padding_mask copied there
  // (Tensor::to: no copy for a tensor already there; from a pinned batch
  // the copy to a GPU reads page-locked memory). Indices stay as they are.
  Batch to(Device device) const;
  // Calls f(Tensor&) on every defined tensor (fields in order, then lengths,
  // then padding_mask): the one walk that moving, pinning and recording a
  // batch's tensors share.
  template <class F>
  void each_tensor(F&& f) {
    for (Tensor& t : fields)
      if (t.defined()) f(t);
    if (lengths.defined()) f(lengths);
    if (padding_mask.defined()) f(padding_mask);
  }
};

using CollateFn = std::function<Batch(std::vector<Sample>)>;

// Every sample has the same fields with the same shapes and dtypes; field k
// of the batch is (B, ...shape of field k). Mismatches throw ShapeError /
// DTypeError naming the field and the sample.
Batch stack_collate(std::vector<Sample> samples);

// For variable-length sequences: each field with at least one dim is padded
// along dim 0 to the longest in the batch, (L_b, ...) -> (B, L, ...); the
// trailing dims must agree. 0-d fields (labels) are stacked to (B).
// lengths and mask describe field length_field.
struct PadOptions {
  double pad_value = 0;
  // Per-field pad values (index k for field k) when not empty: e.g. {0, -100}
  // pads inputs with 0 and targets with cross_entropy's ignore_index.
  std::vector<double> pad_values;
  size_t length_field = 0;
  // L is rounded up to a multiple of this (kernels like aligned lengths).
  int64_t pad_to_multiple_of = 1;
};
CollateFn pad_collate(PadOptions opt = {});

}  // namespace snug::data
