// SPDX-License-Identifier: MIT
// The table of functions libsnug-cuda.so hands to libsnug's loader
// (NOTE [ The CUDA plugin ] in cuda/plugin_loader.cpp). Plain C++, no CUDA
// header; internal (not installed). Each entry has the type of the function
// of cuda/cuda_api.h, cuda/fused_api.h or distributed/nccl.h it implements,
// so the table cannot drift from the API.
#pragma once
#include <snug/core/plugin_detail.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/fused_api.h>
#include <snug/distributed/nccl.h>

// X(name) for every function of snug::cuda the plugin implements. Not here:
// compiled() and the TF32 switch, which libsnug answers itself.
#define SNUG_CUDA_PLUGIN_FUNCTIONS(X)                                                                                \
  X(device_count)                                                                                                    \
  X(runtime_version) X(current_device) X(set_device) X(properties) X(device_malloc) X(device_free) X(copy_to_device) \
      X(copy_to_host) X(synchronize) X(create_stream) X(create_copy_stream) X(destroy_stream) X(synchronize_stream) X(stream_wait)         \
          X(record_event) X(event_done) X(synchronize_event) X(elapsed_ms) X(destroy_event) X(ensure_registered)     \
              X(pinned_allocate) X(pinned_free) X(pinned_record_stream) X(unary_f32) X(binary_f32)                   \
                  X(attention_forward) X(attention_backward) X(set_attention_chunk_bytes)
// ... and of snug::distributed (the NCCL group, cuda/nccl/, or its stand-in).
#define SNUG_CUDA_PLUGIN_NCCL_FUNCTIONS(X) X(nccl_available) X(make_nccl_group)

namespace snug::cuda {

// Bump when the table changes (a field added, removed or retyped) or the
// Backend interface of core/backend.h, or memory::RawBackend's, does (the plugin's CudaBackend overrides
// its virtual methods, so a plugin built against another layout must be refused).
//   2: the fused ops became Backend methods (linear_act, causal_attention, ...).
//   3: causal_attention became attention, with an AttentionMask.
//   4: cuda::attention_forward / _backward (causal or not, key padding)
//      replaced causal_attention_forward / _backward.
//   5: memory::RawBackend (the plugin's DeviceMemoryBackend derives from it)
//      gained free_memory(), create_copy_stream(), wait_stream(),
//      record_timed_event() and elapsed_ms(); the table create_copy_stream;
//      Backend copy_across_async.
inline constexpr uint32_t kPluginAbiVersion = 5;
inline constexpr const char* kPluginEntry = "snug_cuda_plugin";

struct PluginApi {
  plugin::Header header;
#define SNUG_CUDA_PLUGIN_FIELD(name) decltype(&::snug::cuda::name) name;
  SNUG_CUDA_PLUGIN_FUNCTIONS(SNUG_CUDA_PLUGIN_FIELD)
#undef SNUG_CUDA_PLUGIN_FIELD
#define SNUG_CUDA_PLUGIN_FIELD(name) decltype(&::snug::distributed::name) name;
  SNUG_CUDA_PLUGIN_NCCL_FUNCTIONS(SNUG_CUDA_PLUGIN_FIELD)
#undef SNUG_CUDA_PLUGIN_FIELD
};

}  // namespace snug::cuda
