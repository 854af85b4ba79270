// SPDX-License-Identifier: MIT
// Tensor factories. Every byte comes from memory::allocate via Storage.
#include <omp.h>

#include <cmath>
#include <cstring>

#include <snug/core/backend.h>
#include <snug/core/cpu/gemm.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/core/tensor.h>

namespace snug {

namespace {
void check_shape(const Shape& shape, const char* op) {
  for (int64_t d : shape) SNUG_CHECK(d >= 0, ShapeError, op, ": negative dimension in shape ", shape_str(shape));
}
Tensor finish(Tensor t, const TensorOptions& opt) {
  if (opt.requires_grad) t.requires_grad_(true);
  return t;
}
}  // namespace

Tensor empty(const Shape& shape, TensorOptions opt) {
  check_shape(shape, "empty");
  if (opt.device.is_cuda()) backend_for(opt.device);  // clear error if no CUDA
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(opt.device, numel_of(shape) * dtype_size(opt.dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = opt.dtype;
  return finish(Tensor(std::move(impl)), opt);
}

Tensor full(const Shape& shape, double value, TensorOptions opt) {
  bool rg = opt.requires_grad;
  Tensor t = empty(shape, opt.with_requires_grad(false));
  raw::fill_(t, value);
  return finish(t, opt.with_requires_grad(rg));
}
Tensor zeros(const Shape& shape, TensorOptions opt) { return full(shape, 0.0, opt); }
Tensor ones(const Shape& shape, TensorOptions opt) { return full(shape, 1.0, opt); }
Tensor scalar_tensor(double value, TensorOptions opt) { return full({}, value, opt); }

Tensor arange(double end, TensorOptions opt) { return arange(0, end, 1, opt); }
Tensor arange(double start, double end, double step, TensorOptions opt) {
  SNUG_CHECK(step != 0, ValueError, "arange: step must be nonzero");
  SNUG_CHECK(std::isfinite(start) && std::isfinite(end), ValueError, "arange: start and end must be finite, got ",
             start, " and ", end);
  double n_real = std::ceil((end - start) / step);
  int64_t n = n_real > 0 ? static_cast<int64_t>(n_real) : 0;
  Tensor host = empty({n}, TensorOptions(DType::f64));
  double* p = host.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i] = start + static_cast<double>(i) * step;
  Tensor t = raw::to_device(raw::to_dtype(host, opt.dtype), opt.device);
  return finish(t, opt);
}

Tensor eye(int64_t n, TensorOptions opt) {
  SNUG_CHECK(n >= 0, ShapeError, "eye: n must be >= 0, got ", n);
  Tensor host = zeros({n, n}, TensorOptions(DType::f64));
  double* p = host.data<double>();
  for (int64_t i = 0; i < n; ++i) p[i * n + i] = 1;
  return finish(raw::to_device(raw::to_dtype(host, opt.dtype), opt.device), opt);
}

namespace {
Tensor random_tensor(RandomKind kind, const Shape& shape, double a, double b, TensorOptions opt, Generator* gen,
                     const char* op) {
  bool rg = opt.requires_grad;
  DType want = opt.dtype;
  SNUG_CHECK(is_floating(want), DTypeError, op, ": expected a floating dtype, got ", dtype_name(want));
  profiler::RecordOp rec(op, opt.device);
  Tensor t = empty(shape, opt.with_requires_grad(false));
  Generator& g = gen ? *gen : default_generator();
  // One Philox counter yields 4 values; reserve enough for every element.
  PhiloxState st = g.reserve((static_cast<uint64_t>(t.numel()) + 3) / 4);
  backend_for(t.device()).random(kind, st, a, b, t);
  return finish(t, opt.with_requires_grad(rg));
}
}  // namespace

Tensor rand(const Shape& shape, TensorOptions opt, Generator* gen) {
  return random_tensor(RandomKind::uniform, shape, 0, 1, opt, gen, "rand");
}
Tensor randn(const Shape& shape, TensorOptions opt, Generator* gen) {
  return random_tensor(RandomKind::normal, shape, 0, 1, opt, gen, "randn");
}
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opt, Generator* gen) {
  SNUG_CHECK(high > low, ValueError, "randint: expected low < high, got low=", low, " high=", high);
  // Uniform doubles in [low, high), floored: exact for ranges below 2^24.
  Tensor u = random_tensor(RandomKind::uniform, shape, 0, 1, TensorOptions(DType::f64, opt.device), gen, "randint");
  Tensor host = raw::to_device(u, kCPU);
  double* p = host.data<double>();
  int64_t n = host.numel(), range = high - low;
  Tensor out = empty(shape, TensorOptions(DType::i64));
  int64_t* o = out.data<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    int64_t v = low + static_cast<int64_t>(std::floor(p[i] * static_cast<double>(range)));
    o[i] = v >= high ? high - 1 : v;
  }
  return finish(raw::to_device(raw::to_dtype(out, opt.dtype), opt.device), opt);
}

Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.options()); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.options()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.options()); }
Tensor full_like(const Tensor& t, double v) { return full(t.shape(), v, t.options()); }

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opt) {
  SNUG_CHECK(static_cast<int64_t>(data.size()) == numel_of(shape), ShapeError, "from_vector: ", data.size(),
             " values do not fill shape ", shape_str(shape), " (", numel_of(shape), " elements)");
  Tensor host = empty(shape, TensorOptions(dtype_v<T>));
  if constexpr (std::is_same_v<T, bool>) {
    bool* p = host.data<bool>();
    for (size_t i = 0; i < data.size(); ++i) p[i] = data[i];
  } else {
    if (!data.empty()) std::memcpy(host.data_ptr(), data.data(), data.size() * sizeof(T));
  }
  return finish(raw::to_device(raw::to_dtype(host, opt.dtype), opt.device), opt);
}
template Tensor from_vector(const std::vector<float>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<double>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int64_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int32_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<uint8_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<int8_t>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<bool>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<Half>&, const Shape&, TensorOptions);
template Tensor from_vector(const std::vector<BFloat16>&, const Shape&, TensorOptions);

Tensor from_blob_copy(const void* ptr, const Shape& shape, DType dtype, TensorOptions opt) {
  Tensor host = empty(shape, TensorOptions(dtype));
  if (host.nbytes()) std::memcpy(host.data_ptr(), ptr, host.nbytes());
  return finish(raw::to_device(raw::to_dtype(host, opt.dtype), opt.device), opt);
}

Tensor from_blob(void* ptr, const Shape& shape, DType dtype, std::function<void(void*)> deleter) {
  check_shape(shape, "from_blob");
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(kCPU, ptr, numel_of(shape) * dtype_size(dtype), std::move(deleter));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

void set_num_threads(int n) {
  kernels::set_num_threads(n);  // validates n; sets OpenMP's count for every CPU loop too
}
int get_num_threads() { return kernels::get_num_threads(); }

}  // namespace snug
