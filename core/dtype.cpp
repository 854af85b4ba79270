// SPDX-License-Identifier: MIT
#include <snug/core/dtype.h>

namespace snug {

DType parse_dtype(const std::string& s) {
  if (s == "f32" || s == "float32" || s == "float") return DType::f32;
  if (s == "f16" || s == "float16" || s == "half") return DType::f16;
  if (s == "bf16" || s == "bfloat16") return DType::bf16;
  if (s == "f64" || s == "float64" || s == "double") return DType::f64;
  if (s == "i8" || s == "int8") return DType::i8;
  if (s == "u8" || s == "uint8") return DType::u8;
  if (s == "i32" || s == "int32") return DType::i32;
  if (s == "i64" || s == "int64" || s == "long") return DType::i64;
  if (s == "bool" || s == "b8") return DType::b8;
  throw DTypeError(
      str("parse_dtype: unknown dtype \"", s, "\" (expected f32, f16, bf16, f64, i8, u8, i32, i64 or bool)"));
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  auto rank = [](DType d) {  // within a category, bigger rank wins
    switch (d) {
      case DType::b8:
        return 0;
      case DType::u8:
        return 1;
      case DType::i8:
        return 2;
      case DType::i32:
        return 3;
      case DType::i64:
        return 4;
      case DType::f16:
        return 10;
      case DType::bf16:
        return 10;
      case DType::f32:
        return 11;
      case DType::f64:
        return 12;
    }
    return 0;
  };
  if ((a == DType::f16 && b == DType::bf16) || (a == DType::bf16 && b == DType::f16)) return DType::f32;
  if ((a == DType::u8 && b == DType::i8) || (a == DType::i8 && b == DType::u8))
    return DType::i32;  // wider signed type holds both
  return rank(a) >= rank(b) ? a : b;
}

}  // namespace snug
