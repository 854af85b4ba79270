#include "core/backend.h"

#include "core/cpu_backend.h"

namespace snug {

namespace {
Backend*& slot(DeviceType t) {
  static Backend* table[kNumDeviceTypes] = {};
  return table[static_cast<int>(t)];
}
}  // namespace

void register_backend(DeviceType t, Backend* b) { slot(t) = b; }

bool has_backend(DeviceType t) {
  if (t == DeviceType::CPU) return true;
  return slot(t) != nullptr;
}

Backend& backend_for(DeviceType t) {
  if (t == DeviceType::CPU) {
    static CpuBackend cpu;  // always present
    return cpu;
  }
  Backend* b = slot(t);
  SNUG_CHECK(b != nullptr, DeviceError, "no backend for device type ", (t == DeviceType::CUDA ? "cuda" : "?"),
             ": this build of snug has no CUDA support (configure with -DSNUG_CUDA=ON) or no GPU is present");
  return *b;
}

}  // namespace snug
