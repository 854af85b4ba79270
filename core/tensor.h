// SPDX-License-Identifier: MIT
// Tensor: a cheap, refcounted handle to a TensorImpl (storage + view geometry
// + dtype + autograd state). Copying a Tensor shares the data, like LibTorch.
//
// Methods that can record autograd history (views, to(), in-place ops) are
// declared here and implemented in autograd/, which is what lets core/ stay
// free of autograd while there is a single Tensor type (see DESIGN.md).
#pragma once
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <snug/base/device.h>
#include <snug/core/dtype.h>
#include <snug/core/shape.h>
#include <snug/core/storage.h>

namespace snug {

struct AutogradMeta;  // autograd/node.h: grad, grad_fn, leaf accumulator, name
struct Node;          // autograd/node.h

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements, from storage->data()
  DType dtype = DType::f32;
  bool requires_grad = false;
  bool is_view = false;                    // made by a differentiable view op (in-place + autograd on views is refused)
  std::shared_ptr<AutogradMeta> autograd;  // created lazily by autograd/
};

// Options for factories: dtype, device, requires_grad.
struct TensorOptions {
  DType dtype = DType::f32;
  Device device = kCPU;
  bool requires_grad = false;
  TensorOptions() = default;
  TensorOptions(DType d) : dtype(d) {}         // NOLINT: zeros({2}, kInt64)
  TensorOptions(Device d) : device(d) {}       // NOLINT
  TensorOptions(const char* d) : device(d) {}  // NOLINT: zeros({2}, "cpu:1")
  TensorOptions(DType dt, Device dv, bool rg = false) : dtype(dt), device(dv), requires_grad(rg) {}
  TensorOptions with_dtype(DType d) const {
    auto o = *this;
    o.dtype = d;
    return o;
  }
  TensorOptions with_device(Device d) const {
    auto o = *this;
    o.device = d;
    return o;
  }
  TensorOptions with_requires_grad(bool r) const {
    auto o = *this;
    o.requires_grad = r;
    return o;
  }
};

class Tensor {
 public:
  Tensor() = default;  // undefined tensor (defined() == false)
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // ---- geometry and type ------------------------------------------------
  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl()->shape; }
  const Shape& sizes() const { return shape(); }
  const Strides& strides() const { return impl()->strides; }
  int64_t dim() const { return static_cast<int64_t>(shape().size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return numel_of(shape()); }
  int64_t offset() const { return impl()->offset; }
  DType dtype() const { return impl()->dtype; }
  Device device() const { return impl()->storage->device(); }
  std::size_t element_size() const { return dtype_size(dtype()); }
  std::size_t nbytes() const { return numel() * element_size(); }
  bool is_contiguous() const;
  bool is_floating_point() const { return is_floating(dtype()); }
  TensorOptions options() const { return TensorOptions(dtype(), device()); }

  // ---- raw data ---------------------------------------------------------
  void* data_ptr() const;  // first element (storage data + offset)
  // Typed pointer; throws DTypeError if T does not match dtype().
  template <class T>
  T* data() const;
  const std::shared_ptr<Storage>& storage() const { return impl()->storage; }
  uint32_t version() const { return impl()->storage->version(); }
  void bump_version() const { impl()->storage->bump_version(); }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }
  TensorImpl* impl() const;  // throws if undefined
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- values -------------------------------------------------------------
  double item() const;  // one-element tensors only
  // The element as T. Integer and bool tensors are read as integers, so
  // item<int64_t>() is exact for every int64 value; a value T cannot hold
  // (300 as uint8, a NaN or 1e30 as int64) is a ValueError, as LibTorch's
  // checked conversion. Floating values read as an integer truncate toward 0.
  template <class T>
  T item() const;
  template <class T>
  std::vector<T> to_vector() const;  // converts to T, row-major (as .to(dtype))
  std::string str() const;           // readable printing (also operator<<)

  // ---- views (share storage; differentiable) -------------------------------
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers
  Tensor reshape(const Shape& shape) const;  // view if possible, else a copy
  Tensor flatten(int64_t start = 0, int64_t end = -1) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;  // -1 keeps a dim
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor contiguous() const;  // this tensor if already contiguous, else a copy
  Tensor clone() const;

  // ---- conversion (differentiable) ----------------------------------------
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor to(const char* device) const { return to(Device(device)); }

  // ---- in-place (bump the version counter) -------------------------------
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& copy_(const Tensor& src);  // broadcasts src, converts dtype/device
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  Tensor& clamp_(double lo, double hi);
  Tensor& relu_();
  Tensor& masked_fill_(const Tensor& mask, double value);

  // ---- common ops as methods (same as the free functions in autograd/ops.h)
  Tensor sum() const;
  Tensor sum(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor matmul(const Tensor& other) const;
  Tensor pow(double exponent) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor sqrt() const;
  Tensor abs() const;
  Tensor neg() const;
  Tensor relu() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;

  // ---- autograd (implemented in autograd/) ------------------------------
  bool requires_grad() const { return impl()->requires_grad; }
  Tensor& requires_grad_(bool on = true);  // leaves only
  Tensor grad() const;                     // undefined until a backward reaches it
  void set_grad(const Tensor& g) const;
  bool is_leaf() const;  // no grad_fn
  std::shared_ptr<Node> grad_fn() const;
  // Seeds with ones for a one-element tensor; else pass `grad` of the same shape.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;
  Tensor detach() const;     // shares data, no history
  void retain_grad() const;  // keep .grad() on a non-leaf
  // Hook on the gradient flowing into this tensor; may return a replacement
  // (or an undefined Tensor to keep the gradient as is).
  void register_hook(std::function<Tensor(const Tensor&)> hook) const;
  // A name shown in error messages and anomaly reports.
  void set_name(const std::string& name) const;
  std::string name() const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// ---- factories (core/factory.cpp) -------------------------------------------
Tensor empty(const Shape& shape, TensorOptions opt = {});
Tensor zeros(const Shape& shape, TensorOptions opt = {});
Tensor ones(const Shape& shape, TensorOptions opt = {});
Tensor full(const Shape& shape, double value, TensorOptions opt = {});
Tensor scalar_tensor(double value, TensorOptions opt = {});  // 0-d
Tensor arange(double end, TensorOptions opt = DType::i64);
Tensor arange(double start, double end, double step = 1, TensorOptions opt = DType::i64);
Tensor eye(int64_t n, TensorOptions opt = {});
class Generator;                                                                     // core/generator.h
Tensor rand(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr);   // U[0,1)
Tensor randn(const Shape& shape, TensorOptions opt = {}, Generator* gen = nullptr);  // N(0,1)
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt = DType::i64,
               Generator* gen = nullptr);  // [low, high)
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
// Copies `data` (converted to opt.dtype) into a new tensor of `shape`.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opt = dtype_v<T>);
template <class T>
Tensor from_vector(const std::vector<T>& data) {
  return from_vector(data, {static_cast<int64_t>(data.size())});
}
// Copies n elements of type dtype from `ptr` (host memory).
Tensor from_blob_copy(const void* ptr, const Shape& shape, DType dtype, TensorOptions opt = {});
// Wraps host memory without copying; `deleter` (may be empty) runs when the
// last view dies. The memory is not counted by the allocator.
Tensor from_blob(void* ptr, const Shape& shape, DType dtype, std::function<void(void*)> deleter = {});

// ---- threads ------------------------------------------------------------------
void set_num_threads(int n);  // OpenMP threads used by CPU kernels
int get_num_threads();

}  // namespace snug
