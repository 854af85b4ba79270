// SPDX-License-Identifier: MIT
// Shapes and strides (in elements). Helpers shared by every op.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace snug {

using Shape = std::vector<int64_t>;
using Strides = std::vector<int64_t>;

int64_t numel_of(const Shape& s);
Strides contiguous_strides(const Shape& s);
std::string shape_str(const Shape& s);  // "[2, 3, 4]"

// Wraps a possibly negative dim into [0, ndim); throws IndexError naming op.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op);
// NumPy broadcasting of two shapes; throws ShapeError naming op.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);

}  // namespace snug
