// SPDX-License-Identifier: MIT
// Device: where a tensor's bytes live. A leaf header (memory/ keys its pools
// by Device, so it must not depend on anything tensor-shaped).
//
//   "cpu"    the host (same as cpu:0)
//   "cpu:N"  virtual CPU device N: host memory with its own pool and optional
//            capacity, so placement and OOM behaviour are testable without GPUs
//   "cuda:N" NVIDIA GPU N
#pragma once
#include <cstdint>
#include <functional>
#include <ostream>
#include <string>

#include <snug/base/error.h>

namespace snug {

enum class DeviceType : int8_t { CPU = 0, CUDA = 1 };
inline constexpr int kNumDeviceTypes = 2;
inline const char* device_type_name(DeviceType t) { return t == DeviceType::CPU ? "cpu" : "cuda"; }

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  constexpr Device() = default;
  constexpr Device(DeviceType t, int i = 0) : type(t), index(i) {}
  // Parses "cpu", "cpu:2", "cuda", "cuda:1". Throws DeviceError on anything else.
  Device(const std::string& s) : Device(parse(s)) {}        // NOLINT: implicit like torch::Device
  Device(const char* s) : Device(parse(std::string(s))) {}  // NOLINT

  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  bool operator==(const Device& o) const { return type == o.type && index == o.index; }
  bool operator!=(const Device& o) const { return !(*this == o); }
  bool operator<(const Device& o) const { return type != o.type ? type < o.type : index < o.index; }

  std::string str() const { return std::string(is_cpu() ? "cpu" : "cuda") + ":" + std::to_string(index); }

  static Device parse(const std::string& s) {
    std::string kind = s, idx;
    auto colon = s.find(':');
    if (colon != std::string::npos) {
      kind = s.substr(0, colon);
      idx = s.substr(colon + 1);
      bool digits = !idx.empty() && idx.size() <= 6;
      for (char c : idx) digits = digits && c >= '0' && c <= '9';
      SNUG_CHECK(digits, DeviceError, "Device: bad index in \"", s,
                 "\" (expected e.g. \"cpu\", \"cpu:1\", \"cuda:0\")");
    }
    int i = idx.empty() ? 0 : std::stoi(idx);
    if (kind == "cpu") return Device(DeviceType::CPU, i);
    if (kind == "cuda") return Device(DeviceType::CUDA, i);
    throw DeviceError(::snug::str("Device: unknown device \"", s, "\" (expected \"cpu\", \"cpu:N\" or \"cuda:N\")"));
  }
};

inline const Device kCPU{DeviceType::CPU, 0};

inline std::ostream& operator<<(std::ostream& os, const Device& d) { return os << d.str(); }

}  // namespace snug

template <>
struct std::hash<snug::Device> {
  size_t operator()(const snug::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type) * 1024 + d.index);
  }
};
