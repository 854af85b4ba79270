// SPDX-License-Identifier: MIT
#include <snug/data/collate.h>

#include <algorithm>
#include <cstring>

#include <snug/base/error.h>
#include <snug/core/raw_ops.h>

namespace snug::data {

namespace {

// dst[...] = src, where dst is a fresh contiguous CPU slice of the batch.
// memcpy when the bytes already line up (the common case), else the general
// copy (strided views, other devices).
void copy_into(const Tensor& dst, const Tensor& src) {
  if (src.is_contiguous() && src.dtype() == dst.dtype() && src.device() == dst.device() &&
      src.device().type == DeviceType::CPU && src.shape() == dst.shape()) {
    std::memcpy(dst.data_ptr(), src.data_ptr(), src.nbytes());
  } else {
    raw::copy_(dst, src);
  }
}

void check_fields(const std::vector<Sample>& samples, const char* who) {
  SNUG_CHECK(!samples.empty(), ValueError, who, ": no samples to collate");
  for (size_t b = 0; b < samples.size(); ++b) {
    SNUG_CHECK(samples[b].size() == samples[0].size(), ShapeError, who, ": sample ", b, " of the batch has ",
               samples[b].size(), " fields but sample 0 has ", samples[0].size());
    for (size_t k = 0; k < samples[b].size(); ++k) {
      SNUG_CHECK(samples[b][k].defined(), ValueError, who, ": field ", k, " of sample ", b, " is undefined");
      SNUG_CHECK(samples[b][k].dtype() == samples[0][k].dtype(), DTypeError, who, ": field ", k, " of sample ", b,
                 " is ", dtype_name(samples[b][k].dtype()), " but sample 0's is ", dtype_name(samples[0][k].dtype()));
    }
  }
}

}  // namespace

Batch Batch::to(Device device) const {
  Batch out = *this;  // shares the tensors, copies the indices
  out.each_tensor([&](Tensor& t) { t = t.to(device); });
  return out;
}

Batch stack_collate(std::vector<Sample> samples) {
  check_fields(samples, "stack_collate");
  const auto B = int64_t(samples.size());
  Batch out;
  for (size_t k = 0; k < samples[0].size(); ++k) {
    const Tensor& first = samples[0][k];
    Shape shape = first.shape();
    for (int64_t b = 0; b < B; ++b)
      SNUG_CHECK(samples[size_t(b)][k].shape() == shape, ShapeError, "stack_collate: field ", k, " of sample ", b,
                 " has shape ", shape_str(samples[size_t(b)][k].shape()), " but sample 0's is ", shape_str(shape),
                 " (variable-length fields need pad_collate)");
    shape.insert(shape.begin(), B);
    Tensor t = empty(shape, first.dtype());  // (B, ...)
    for (int64_t b = 0; b < B; ++b) copy_into(raw::select(t, 0, b), samples[size_t(b)][k]);
    out.fields.push_back(t);
  }
  return out;
}

CollateFn pad_collate(PadOptions opt) {
  SNUG_CHECK(opt.pad_to_multiple_of >= 1, ValueError, "pad_collate: pad_to_multiple_of must be >= 1, got ",
             opt.pad_to_multiple_of);
  return [opt](std::vector<Sample> samples) {
    check_fields(samples, "pad_collate");
    const auto B = int64_t(samples.size());
    const size_t nf = samples[0].size();
    SNUG_CHECK(opt.length_field < nf && samples[0][opt.length_field].dim() >= 1, ValueError,
               "pad_collate: length_field ", opt.length_field,
               " is not a field with at least one dim (the samples have ", nf, " fields)");
    SNUG_CHECK(opt.pad_values.empty() || opt.pad_values.size() == nf, ValueError,
               "pad_collate: ", opt.pad_values.size(), " pad_values for ", nf, " fields");
    Batch out;
    for (size_t k = 0; k < nf; ++k) {
      const Tensor& first = samples[0][k];
      if (first.dim() == 0) {                  // labels and other scalars: stacked
        Tensor t = empty({B}, first.dtype());  // (B)
        for (int64_t b = 0; b < B; ++b) {
          SNUG_CHECK(samples[size_t(b)][k].dim() == 0, ShapeError, "pad_collate: field ", k, " of sample ", b,
                     " has shape ", shape_str(samples[size_t(b)][k].shape()), " but sample 0's is a scalar");
          copy_into(raw::select(t, 0, b), samples[size_t(b)][k]);
        }
        out.fields.push_back(t);
        continue;
      }
      const Shape tail(first.shape().begin() + 1, first.shape().end());
      int64_t L = 0;
      for (int64_t b = 0; b < B; ++b) {
        const Tensor& x = samples[size_t(b)][k];
        SNUG_CHECK(x.dim() == first.dim() && Shape(x.shape().begin() + 1, x.shape().end()) == tail, ShapeError,
                   "pad_collate: field ", k, " of sample ", b, " has shape ", shape_str(x.shape()),
                   " but sample 0's is ", shape_str(first.shape()), " (only dim 0 may differ)");
        L = std::max(L, x.size(0));
      }
      L = (L + opt.pad_to_multiple_of - 1) / opt.pad_to_multiple_of * opt.pad_to_multiple_of;
      Shape shape = tail;
      shape.insert(shape.begin(), {B, L});
      Tensor t = full(shape, opt.pad_values.empty() ? opt.pad_value : opt.pad_values[k], first.dtype());  // (B, L, ...)
      for (int64_t b = 0; b < B; ++b) {
        const Tensor& x = samples[size_t(b)][k];
        if (x.size(0) > 0) copy_into(raw::slice(raw::select(t, 0, b), 0, 0, x.size(0), 1), x);
      }
      out.fields.push_back(t);
      if (k == opt.length_field) {
        out.lengths = empty({B}, DType::i64);  // (B)
        out.padding_mask = full({B, L}, 1.0, DType::b8);  // (B, L), true at padding
        int64_t* len = out.lengths.data<int64_t>();
        bool* m = out.padding_mask.data<bool>();
        for (int64_t b = 0; b < B; ++b) {
          len[b] = samples[size_t(b)][k].size(0);
          std::fill(m + b * L, m + b * L + len[b], false);
        }
      }
    }
    return out;
  };
}

}  // namespace snug::data
