// SPDX-License-Identifier: MIT
// cuda/cuda_api.h, cuda/fused_api.h and distributed/nccl.h as libsnug
// implements them in every build: forwarders to the CUDA backend plugin.
//
// NOTE [ The CUDA plugin ]
// Pay only for what is used. Everything that needs CUDA (cuda/*.cu, cuda/*.cpp,
// cuda/nccl/) is built into libsnug-cuda.so, a MODULE linked against
// libsnug.so, libcudart, cuBLAS(Lt), cuDNN and NCCL; libsnug.so itself links
// none of them. A program that never asks for a CUDA device starts without
// mapping any CUDA library: `charlm --help` peaked at 161 MiB resident (VmHWM)
// in 900 MiB of address space with CUDA and MPI linked in, and at 4.5 MiB in
// 13 MiB without (tests/test_lazy_backends.cpp and the ctests
// charlm_help_maps, charlm_train_maps check it). ggml's GGML_BACKEND_DL
// works the same way.
//
// Loading. The first call here that needs the plugin dlopen()s it (once,
// thread-safe; core/plugin.cpp): the path in $SNUG_CUDA_PLUGIN if set
// ("none": never), else libsnug-cuda.so next to libsnug.so (dladdr: the
// build tree puts both in one directory, install puts both in lib/), else
// in the configured install lib dir. Its extern "C" snug_cuda_plugin()
// returns a PluginApi (cuda/plugin_api.h): a plugin::Header (ABI version,
// table size, snug version, host token: any mismatch refuses the plugin
// with a message saying which) and one pointer per API function.
//
// Without the plugin (a CPU-only build, SNUG_CUDA_PLUGIN=none, or a plugin
// that fails to load, e.g. libcudart is missing) libsnug behaves as a
// machine with no GPU: device_count() is 0, has_backend(CUDA) is false and
// every call that needs a device throws a DeviceError that carries the
// reason (plugin_error()). The no-op calls (device_free(nullptr),
// destroy_stream(0), ...) and the TF32 switch never load it.
//
// What loads it: a program asking about CUDA (device_count, is_available,
// compiled, ensure_registered; backend_for / has_backend of DeviceType::CUDA,
// i.e. a tensor on cuda:N; DataLoader's pin_memory; the NCCL group). Library
// code reaches this file only for tensors already on a CUDA device, so CPU
// work never does; keep it so (no static initializer, no is_available() on
// a CPU path).
//
// Symbols. The plugin defines snug::cuda::device_count etc., the same names
// as the forwarders below. It is dlopen()ed RTLD_LOCAL, so the program and
// libsnug keep binding to the forwarders, and it is linked with
// -Bsymbolic-functions (cmake/plugins.cmake), so its own calls and the
// addresses in its table bind to its own definitions instead of looping back
// through libsnug. Only functions are bound that way: data (function-local
// statics of inline functions, typeinfo, vtables of libsnug's classes) still
// resolves to libsnug's one copy. The plugin's static initializers must not
// call back into this file (the load is still in progress).
//
// A static libsnug.a cannot have plugins (each would bring a second libsnug
// with its own registries; the host token catches that): SNUG_SHARED=OFF
// builds neither the CUDA nor the MPI plugin (cmake/cuda.cmake).
#include <snug/base/error.h>
#include <snug/core/backend.h>
#include <snug/core/plugin_detail.h>
#include <snug/cuda/plugin_api.h>

#include <atomic>

namespace snug::cuda {

namespace {

// Whether this build made libsnug-cuda.so (only for messages; set by CMake).
constexpr bool kBuilt = SNUG_CUDA_PLUGIN_BUILT;

const plugin::Loaded& loaded() {
  static const plugin::Loaded l = plugin::load(
      {"CUDA backend", "libsnug-cuda.so", "SNUG_CUDA_PLUGIN", kPluginEntry, kPluginAbiVersion, sizeof(PluginApi)});
  return l;
}

// The plugin's table, or null (header is PluginApi's first member).
const PluginApi* api() { return reinterpret_cast<const PluginApi*>(loaded().table); }

// The plugin's table, or a DeviceError naming the call and the reason.
const PluginApi& need(const char* what) {
  if (const PluginApi* a = api()) return *a;
  throw DeviceError(str("cuda::", what, ": no CUDA support: ", plugin_error()));
}

std::atomic<bool> g_allow_tf32{false};

}  // namespace

std::string plugin_error() {
  if (api() != nullptr) return "";
  return str("the CUDA backend plugin libsnug-cuda.so was not loaded: ", loaded().error,
             kBuilt ? ""
                    : " (this build of snug has no CUDA support: configure with -DSNUG_CUDA=ON on a machine with "
                      "nvcc and cuDNN)");
}

bool compiled() { return api() != nullptr; }
int device_count() { return api() ? api()->device_count() : 0; }
int runtime_version() { return api() ? api()->runtime_version() : 0; }
int current_device() { return need("current_device").current_device(); }
void set_device(int device) { need("set_device").set_device(device); }
DeviceProperties properties(int device) { return need("properties").properties(device); }
void* device_malloc(std::size_t bytes) { return need("device_malloc").device_malloc(bytes); }
void device_free(void* ptr) {
  if (ptr) need("device_free").device_free(ptr);
}
void copy_to_device(void* dst, const void* src, std::size_t bytes) {
  need("copy_to_device").copy_to_device(dst, src, bytes);
}
void copy_to_host(void* dst, const void* src, std::size_t bytes) { need("copy_to_host").copy_to_host(dst, src, bytes); }
void synchronize() { need("synchronize").synchronize(); }
StreamHandle create_stream() { return need("create_stream").create_stream(); }
StreamHandle create_copy_stream() { return need("create_copy_stream").create_copy_stream(); }
void destroy_stream(StreamHandle s) {
  if (s) need("destroy_stream").destroy_stream(s);
}
void synchronize_stream(StreamHandle s) { need("synchronize_stream").synchronize_stream(s); }
void stream_wait(StreamHandle waiter, StreamHandle s) { need("stream_wait").stream_wait(waiter, s); }
EventHandle record_event(StreamHandle s) { return need("record_event").record_event(s); }
bool event_done(EventHandle e) { return need("event_done").event_done(e); }
void synchronize_event(EventHandle e) { need("synchronize_event").synchronize_event(e); }
double elapsed_ms(EventHandle start, EventHandle end) { return need("elapsed_ms").elapsed_ms(start, end); }
void destroy_event(EventHandle e) {
  if (e) need("destroy_event").destroy_event(e);
}
void ensure_registered() {
  if (const PluginApi* a = api()) a->ensure_registered();
}

namespace {
// core/ asks for DeviceType::CUDA through this hook (core/backend.h), so it
// includes nothing of cuda/. Registering it loads nothing: the plugin is opened
// by the hook's first call.
[[maybe_unused]] const bool hook_registered = [] {
  register_lazy_backend(DeviceType::CUDA,
                        {.load = &ensure_registered, .why_absent = &plugin_error, .device_count = &device_count});
  return true;
}();
}  // namespace

// libsnug's own setting (the plugin's cuBLAS and cuDNN calls read it here).
void set_allow_tf32(bool allow) { g_allow_tf32 = allow; }
bool allow_tf32() { return g_allow_tf32; }

void* pinned_allocate(std::size_t bytes) { return need("pinned_allocate").pinned_allocate(bytes); }
void pinned_free(void* p) {
  if (p) need("pinned_free").pinned_free(p);
}
void pinned_record_stream(void* p, std::uintptr_t stream) {
  need("pinned_record_stream").pinned_record_stream(p, stream);
}
void unary_f32(UnaryOp op, double a, double b, const float* x, float* out, int64_t n) {
  need("unary_f32").unary_f32(op, a, b, x, out, n);
}
void binary_f32(BinaryOp op, const float* x, const float* y, float* out, int64_t n) {
  need("binary_f32").binary_f32(op, x, y, out, n);
}

// ---- cuda/fused_api.h ------------------------------------------------------------
void attention_forward(const Tensor& qkv, int64_t heads, double scale, bool causal, const Tensor& key_padding,
                       const Tensor& y, const Tensor& lse, bool tf32) {
  need("attention_forward").attention_forward(qkv, heads, scale, causal, key_padding, y, lse, tf32);
}
void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& gy, int64_t heads,
                        double scale, bool causal, const Tensor& key_padding, const Tensor& dqkv, bool tf32) {
  need("attention_backward").attention_backward(qkv, y, lse, gy, heads, scale, causal, key_padding, dqkv, tf32);
}
std::size_t set_attention_chunk_bytes(std::size_t bytes) {
  return need("set_attention_chunk_bytes").set_attention_chunk_bytes(bytes);
}

}  // namespace snug::cuda

// ---- distributed/nccl.h: the NCCL group is part of the CUDA plugin ------------------
namespace snug::distributed {

bool nccl_available() {
  const cuda::PluginApi* a = cuda::api();
  return a != nullptr && a->nccl_available();
}

std::shared_ptr<ProcessGroup> make_nccl_group(const NcclOptions& opt) {
  const cuda::PluginApi* a = cuda::api();
  if (a == nullptr) throw DistributedError(str("make_nccl_group: snug runs without NCCL here: ", cuda::plugin_error()));
  return a->make_nccl_group(opt);
}

}  // namespace snug::distributed
