// SPDX-License-Identifier: MIT
#include <snug/core/backend.h>

#include <snug/core/cpu/kernel_table.h>

namespace snug {

namespace {
Backend*& slot(DeviceType t) {
  static Backend* table[kNumDeviceTypes] = {};
  return table[static_cast<int>(t)];
}
LazyBackend& lazy(DeviceType t) {
  static LazyBackend table[kNumDeviceTypes] = {};
  return table[static_cast<int>(t)];
}

// Runs the lazy hook of t once, if it has one and nothing is registered yet.
void load_lazy(DeviceType t) {
  if (slot(t) != nullptr || lazy(t).load == nullptr) return;
  lazy(t).load();  // idempotent (the CUDA plugin's ensure_registered runs once)
}
}  // namespace

void register_backend(DeviceType t, Backend* b) { slot(t) = b; }
void register_lazy_backend(DeviceType t, LazyBackend hook) { lazy(t) = hook; }

int device_count(DeviceType t) {
  if (t == DeviceType::CPU) return 1;
  return lazy(t).device_count != nullptr ? lazy(t).device_count() : (has_backend(t) ? 1 : 0);
}

bool has_backend(DeviceType t) {
  if (t == DeviceType::CPU) return true;
  load_lazy(t);
  return slot(t) != nullptr;
}

Backend& backend_for(DeviceType t) {
  if (t == DeviceType::CPU) {
    // Always present: the CPU level in use (NOTE [ CPU levels ] in core/cpu/level.h).
    return *cpu_dispatch::active().backend;
  }
  load_lazy(t);  // the CUDA backend registers itself here, on first use, when a GPU is present
  Backend* b = slot(t);
  if (b == nullptr && lazy(t).why_absent != nullptr) {
    const std::string why = lazy(t).why_absent();
    const char* dev = t == DeviceType::CUDA ? "GPU" : "device";
    throw DeviceError(str("no backend for device type ", device_type_name(t), ": ",
                          why.empty() ? str("the plugin is loaded, but no ", dev, " is present")
                                      : str("no ", dev, " is present (", why, ")")));
  }
  SNUG_CHECK(b != nullptr, DeviceError, "no backend for device type ", device_type_name(t));
  return *b;
}

}  // namespace snug
