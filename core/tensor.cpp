// SPDX-License-Identifier: MIT
// Tensor geometry, raw data access, item(), to_vector() and printing.
#include <snug/core/tensor.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <sstream>
#include <type_traits>

#include <snug/core/raw_ops.h>

namespace snug {

TensorImpl* Tensor::impl() const {
  SNUG_CHECK(impl_ != nullptr, ValueError,
             "Tensor: this tensor is undefined (default-constructed); "
             "create it with a factory such as snug::zeros before use");
  return impl_.get();
}

int64_t Tensor::size(int64_t d) const { return shape()[wrap_dim(d, dim(), "Tensor::size")]; }
int64_t Tensor::stride(int64_t d) const { return strides()[wrap_dim(d, dim(), "Tensor::stride")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;  // any stride is fine for a size-1 dim
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

void* Tensor::data_ptr() const {
  return static_cast<char*>(impl()->storage->data()) + impl()->offset * static_cast<int64_t>(element_size());
}

template <class T>
T* Tensor::data() const {
  SNUG_CHECK(dtype() == dtype_v<T>, DTypeError, "Tensor::data<", dtype_name(dtype_v<T>), ">: tensor has dtype ",
             dtype_name(dtype()));
  return static_cast<T*>(data_ptr());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template Half* Tensor::data<Half>() const;
template BFloat16* Tensor::data<BFloat16>() const;
template int8_t* Tensor::data<int8_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template int32_t* Tensor::data<int32_t>() const;
template int64_t* Tensor::data<int64_t>() const;
template bool* Tensor::data<bool>() const;

double Tensor::item() const {
  SNUG_CHECK(numel() == 1, ValueError, "Tensor::item: expected a tensor with one element, got shape ",
             shape_str(shape()), " (", numel(), " elements)");
  Tensor c = raw::to_dtype(raw::to_device(*this, kCPU), DType::f64).contiguous();
  return *static_cast<const double*>(c.data_ptr());
}

// NOTE [ Exact integer reads ]: a double holds integers exactly only up to
// 2^53, so item<T>() for an integral T never goes through one when the
// tensor is integral: it widens the element to int64 (every integer dtype
// fits) and range-checks that. A floating element is range-checked as a
// double first: converting an out-of-range or NaN double to an integer is
// undefined behaviour.
template <class T>
T Tensor::item() const {
  SNUG_CHECK(numel() == 1, ValueError, "Tensor::item<", dtype_name(dtype_v<T>),
             ">: expected a tensor with one element, got shape ", shape_str(shape()), " (", numel(), " elements)");
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using L = std::numeric_limits<T>;
    if (is_floating_point()) {
      const double v = item();
      // Truncation lands in [min, max] for v in (min - 1, max + 1); max + 1 and
      // min are 0 or powers of two, exact in a double (min - 1 may round to min).
      const double lo = static_cast<double>(L::min()), hi = 2.0 * static_cast<double>(L::max() / 2 + 1);
      SNUG_CHECK(std::isfinite(v) && (v > lo - 1 || v == lo) && v < hi, ValueError, "Tensor::item<",
                 dtype_name(dtype_v<T>), ">: the ", dtype_name(dtype()), " value ", v, " does not fit");
      return static_cast<T>(v);
    }
    const int64_t v = to_vector<int64_t>()[0];
    SNUG_CHECK(v >= static_cast<int64_t>(L::min()) && v <= static_cast<int64_t>(L::max()), ValueError, "Tensor::item<",
               dtype_name(dtype_v<T>), ">: the ", dtype_name(dtype()), " value ", v, " does not fit");
    return static_cast<T>(v);
  } else {
    return to_vector<T>()[0];
  }
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template Half Tensor::item<Half>() const;
template BFloat16 Tensor::item<BFloat16>() const;
template int8_t Tensor::item<int8_t>() const;
template uint8_t Tensor::item<uint8_t>() const;
template int32_t Tensor::item<int32_t>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;

template <class T>
std::vector<T> Tensor::to_vector() const {
  Tensor c = raw::contiguous(raw::to_dtype(raw::to_device(*this, kCPU), dtype_v<T>));
  const T* p = static_cast<const T*>(c.data_ptr());
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int32_t> Tensor::to_vector<int32_t>() const;
template std::vector<uint8_t> Tensor::to_vector<uint8_t>() const;
template std::vector<int8_t> Tensor::to_vector<int8_t>() const;
template std::vector<bool> Tensor::to_vector<bool>() const;
template std::vector<Half> Tensor::to_vector<Half>() const;
template std::vector<BFloat16> Tensor::to_vector<BFloat16>() const;

// Prints like PyTorch: nested brackets, at most 6 items per dim (first and
// last 3 with "..." between), then shape, dtype, device and grad info.
std::string Tensor::str() const {
  if (!defined()) return "Tensor(undefined)";
  std::ostringstream os;
  Tensor v = raw::contiguous(raw::to_dtype(raw::to_device(*this, kCPU), DType::f64));
  const double* p = static_cast<const double*>(v.data_ptr());
  bool integral = is_integral(dtype());
  auto fmt = [&](double x) {
    char buf[32];
    if (dtype() == DType::b8) return std::string(x != 0 ? "true" : "false");
    if (integral)
      std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(x));
    else
      std::snprintf(buf, sizeof buf, "%.4g", x);
    return std::string(buf);
  };
  const Shape& s = shape();
  Strides st = contiguous_strides(s);
  std::function<void(int64_t, int64_t)> rec = [&](int64_t d, int64_t base) {
    if (d == static_cast<int64_t>(s.size())) {
      os << fmt(p[base]);
      return;
    }
    os << "[";
    int64_t n = s[d];
    for (int64_t i = 0; i < n; ++i) {
      if (n > 6 && i == 3) {
        os << "...";
        i = n - 3;
        os << (d + 1 == static_cast<int64_t>(s.size()) ? ", " : ",\n" + std::string(d + 1, ' '));
      }
      rec(d + 1, base + i * st[d]);
      if (i + 1 < n) os << (d + 1 == static_cast<int64_t>(s.size()) ? ", " : ",\n" + std::string(d + 1, ' '));
    }
    os << "]";
  };
  os << "tensor(";
  rec(0, 0);
  os << ", shape=" << shape_str(s) << ", dtype=" << dtype_name(dtype());
  if (device() != kCPU) os << ", device=" << device().str();
  if (requires_grad()) os << ", requires_grad=true";
  os << ")";
  return os.str();
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.str(); }

}  // namespace snug
