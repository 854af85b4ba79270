// SPDX-License-Identifier: MIT
// snug::Error and its family. A leaf header: every folder (memory/ included)
// may include it, and it includes nothing of snug.
//
// NOTE [ Error messages ]
// Every message names the op (or file), the values involved and what was
// expected, e.g. "matmul: shapes [2, 3] and [4, 5] cannot be multiplied
// (expected a.size(-1) == b.size(-2), got 3 vs 4)".
#pragma once
#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>

namespace snug {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

class ShapeError : public Error {
  using Error::Error;
};
class DTypeError : public Error {
  using Error::Error;
};
class DeviceError : public Error {
  using Error::Error;
};
class IndexError : public Error {
  using Error::Error;
};
class IOError : public Error {
  using Error::Error;
};
class ValueError : public Error {
  using Error::Error;
};
class AutogradError : public Error {
  using Error::Error;
};

// Thrown by the caching allocator; the message carries the numbers (request,
// capacity, allocated, cached, largest free block, fragmentation) and advice.
class OutOfMemoryError : public Error {
 public:
  OutOfMemoryError(const std::string& msg, std::size_t requested, std::size_t capacity)
      : Error(msg), requested_(requested), capacity_(capacity) {}
  std::size_t requested() const { return requested_; }
  std::size_t capacity() const { return capacity_; }

 private:
  std::size_t requested_;
  std::size_t capacity_;
};

namespace detail {
inline void cat_into(std::ostringstream&) {}
template <class T, class... R>
void cat_into(std::ostringstream& os, const T& v, const R&... rest) {
  os << v;
  cat_into(os, rest...);
}
}  // namespace detail

// str("matmul: got ", n, " dims") -> std::string
template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  detail::cat_into(os, a...);
  return os.str();
}

}  // namespace snug

// SNUG_CHECK(cond, ErrorType, parts...) throws ErrorType(str(parts...)) when !cond.
#define SNUG_CHECK(cond, Type, ...)                            \
  do {                                                         \
    if (!(cond)) throw ::snug::Type(::snug::str(__VA_ARGS__)); \
  } while (0)
