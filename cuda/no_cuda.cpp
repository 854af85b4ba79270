// SPDX-License-Identifier: MIT
// cuda/cuda_api.h for a build without CUDA (SNUG_CUDA=OFF, or AUTO without
// nvcc/cuDNN). Like a machine with no GPU: device_count() is 0 and every call
// that needs a device throws a DeviceError that says why. This keeps the API
// (and tests/test_cuda.cpp) the same in every build, with no #ifdef.
#include <snug/core/error.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/fused_api.h>

namespace snug::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw DeviceError(::snug::str("cuda::", what,
                                ": this build of snug has no CUDA support "
                                "(configure with -DSNUG_CUDA=ON on a machine with nvcc and cuDNN)"));
}
}  // namespace

bool compiled() { return false; }
int device_count() { return 0; }
int runtime_version() { return 0; }
int current_device() { no_cuda("current_device"); }
void set_device(int) { no_cuda("set_device"); }
DeviceProperties properties(int) { no_cuda("properties"); }
void* device_malloc(std::size_t) { no_cuda("device_malloc"); }
void device_free(void* ptr) {
  if (ptr) no_cuda("device_free");
}
void copy_to_device(void*, const void*, std::size_t) { no_cuda("copy_to_device"); }
void copy_to_host(void*, const void*, std::size_t) { no_cuda("copy_to_host"); }
void synchronize() { no_cuda("synchronize"); }
StreamHandle create_stream() { no_cuda("create_stream"); }
void destroy_stream(StreamHandle s) {
  if (s) no_cuda("destroy_stream");
}
void synchronize_stream(StreamHandle) { no_cuda("synchronize_stream"); }
void stream_wait(StreamHandle, StreamHandle) { no_cuda("stream_wait"); }
EventHandle record_event(StreamHandle) { no_cuda("record_event"); }
bool event_done(EventHandle) { no_cuda("event_done"); }
void synchronize_event(EventHandle) { no_cuda("synchronize_event"); }
double elapsed_ms(EventHandle, EventHandle) { no_cuda("elapsed_ms"); }
void destroy_event(EventHandle e) {
  if (e) no_cuda("destroy_event");
}
void ensure_registered() {}
namespace {
bool g_tf32 = false;  // kept so the setting round-trips in every build
}  // namespace
void set_allow_tf32(bool allow) { g_tf32 = allow; }
bool allow_tf32() { return g_tf32; }
void* pinned_allocate(std::size_t) { no_cuda("pinned_allocate"); }
void pinned_free(void* p) {
  if (p) no_cuda("pinned_free");
}
void pinned_record_stream(void*, std::uintptr_t) { no_cuda("pinned_record_stream"); }
void unary_f32(UnaryOp, double, double, const float*, float*, int64_t) { no_cuda("unary_f32"); }
void binary_f32(BinaryOp, const float*, const float*, float*, int64_t) { no_cuda("binary_f32"); }
void fused_adam(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const update::AdamConsts&) {
  no_cuda("fused_adam");
}
void fused_sgd(const Tensor&, const Tensor&, const Tensor&, const update::SgdConsts&) { no_cuda("fused_sgd"); }
void causal_attention_forward(const Tensor&, int64_t, double, const Tensor&, const Tensor&, bool) {
  no_cuda("causal_attention_forward");
}
void batch_norm_forward_training(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                                 double, const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("batch_norm_forward_training");
}
void batch_norm_forward_inference(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                                  const Tensor&) {
  no_cuda("batch_norm_forward_inference");
}
void batch_norm_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                         const Tensor&, const Tensor&, const Tensor&) {
  no_cuda("batch_norm_backward");
}
std::size_t set_attention_chunk_bytes(std::size_t) { no_cuda("set_attention_chunk_bytes"); }
void causal_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, int64_t, double,
                               const Tensor&, bool) {
  no_cuda("causal_attention_backward");
}
void unscale_check(const Tensor&, const Tensor&, double, const Tensor&, int64_t) { no_cuda("unscale_check"); }

}  // namespace snug::cuda
