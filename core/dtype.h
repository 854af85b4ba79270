// SPDX-License-Identifier: MIT
// DType: the element types a tensor can hold, and dispatch over them.
#pragma once
#include <cstdint>
#include <ostream>
#include <string>

#include <snug/base/error.h>
#include <snug/core/half.h>

namespace snug {

// NOTE [ DType order ] is part of the safetensors mapping and of dispatch;
// append new types at the end and bump kNumDTypes.
enum class DType : int8_t { f32 = 0, f16, bf16, f64, i8, u8, i32, i64, b8 };
inline constexpr int kNumDTypes = 9;
static_assert(static_cast<int>(DType::b8) + 1 == kNumDTypes, "update kNumDTypes");

// Short aliases so user code reads like torch::kFloat32.
inline constexpr DType kFloat32 = DType::f32, kFloat16 = DType::f16, kBFloat16 = DType::bf16, kFloat64 = DType::f64,
                       kInt8 = DType::i8, kUInt8 = DType::u8, kInt32 = DType::i32, kInt64 = DType::i64,
                       kBool = DType::b8;

constexpr std::size_t dtype_size(DType d) {
  switch (d) {
    case DType::f32:
    case DType::i32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::f64:
    case DType::i64:
      return 8;
    case DType::i8:
    case DType::u8:
    case DType::b8:
      return 1;
  }
  return 0;
}
constexpr const char* dtype_name(DType d) {
  switch (d) {
    case DType::f32:
      return "f32";
    case DType::f16:
      return "f16";
    case DType::bf16:
      return "bf16";
    case DType::f64:
      return "f64";
    case DType::i8:
      return "i8";
    case DType::u8:
      return "u8";
    case DType::i32:
      return "i32";
    case DType::i64:
      return "i64";
    case DType::b8:
      return "bool";
  }
  return "?";
}
constexpr bool is_floating(DType d) {
  return d == DType::f32 || d == DType::f16 || d == DType::bf16 || d == DType::f64;
}
constexpr bool is_integral(DType d) { return !is_floating(d); }  // bool counts as integral
DType parse_dtype(const std::string& s);  // "f32", "float32", "bf16", "int64", ... ; throws DTypeError

// Result type of a binary op between two dtypes (NumPy/PyTorch-like):
// bool < integers < floating; mixed f16/bf16 -> f32; wider wins.
DType promote_types(DType a, DType b);

inline std::ostream& operator<<(std::ostream& os, DType d) { return os << dtype_name(d); }

// C++ type <-> DType.
template <class T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct dtype_of<Half> {
  static constexpr DType value = DType::f16;
};
template <>
struct dtype_of<BFloat16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct dtype_of<int8_t> {
  static constexpr DType value = DType::i8;
};
template <>
struct dtype_of<uint8_t> {
  static constexpr DType value = DType::u8;
};
template <>
struct dtype_of<int32_t> {
  static constexpr DType value = DType::i32;
};
template <>
struct dtype_of<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct dtype_of<bool> {
  static constexpr DType value = DType::b8;
};
template <class T>
inline constexpr DType dtype_v = dtype_of<T>::value;

// The type arithmetic happens in: half types compute in float.
template <class T>
struct compute_type {
  using type = T;
};
template <>
struct compute_type<Half> {
  using type = float;
};
template <>
struct compute_type<BFloat16> {
  using type = float;
};
template <class T>
using compute_t = typename compute_type<T>::type;

// dispatch(dtype, "op", [&]<class T>() { ... }) calls the lambda with T the
// C++ type of dtype. Variants restrict the set; an unsupported dtype throws a
// DTypeError naming the op.
template <class F>
decltype(auto) dispatch_all(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f16:
      return f.template operator()<Half>();
    case DType::bf16:
      return f.template operator()<BFloat16>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::i8:
      return f.template operator()<int8_t>();
    case DType::u8:
      return f.template operator()<uint8_t>();
    case DType::i32:
      return f.template operator()<int32_t>();
    case DType::i64:
      return f.template operator()<int64_t>();
    case DType::b8:
      return f.template operator()<bool>();
  }
  throw DTypeError(str(op, ": unknown dtype"));
}
template <class F>
decltype(auto) dispatch_floating(DType d, const char* op, F&& f) {
  switch (d) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f16:
      return f.template operator()<Half>();
    case DType::bf16:
      return f.template operator()<BFloat16>();
    case DType::f64:
      return f.template operator()<double>();
    default:
      throw DTypeError(str(op, ": expected a floating dtype (f32, f16, bf16, f64), got ", dtype_name(d)));
  }
}
// Numeric types without bool (arithmetic on bool is an error, as in PyTorch).
template <class F>
decltype(auto) dispatch_numeric(DType d, const char* op, F&& f) {
  // Its own switch, not dispatch_all's: the lambda is never instantiated for
  // bool (less code, and no arithmetic functor compiled for a type it rejects).
  switch (d) {
    case DType::f32:
      return f.template operator()<float>();
    case DType::f16:
      return f.template operator()<Half>();
    case DType::bf16:
      return f.template operator()<BFloat16>();
    case DType::f64:
      return f.template operator()<double>();
    case DType::i8:
      return f.template operator()<int8_t>();
    case DType::u8:
      return f.template operator()<uint8_t>();
    case DType::i32:
      return f.template operator()<int32_t>();
    case DType::i64:
      return f.template operator()<int64_t>();
    case DType::b8:
      break;
  }
  throw DTypeError(str(op, ": arithmetic is not defined for bool tensors; convert with .to(kFloat32) or .to(kInt64)"));
}

}  // namespace snug
