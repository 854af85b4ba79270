// SPDX-License-Identifier: MIT
// libsnug-cuda.so's one entry point (NOTE [ The CUDA plugin ] in
// cuda/plugin_loader.cpp): the table of the plugin's own implementations.
// The plugin is linked with -Bsymbolic-functions, so `&::snug::cuda::name`
// here is the plugin's function, not libsnug's forwarder of the same name.
#include <snug/cuda/plugin_api.h>
#include <snug/version.h>

extern "C" __attribute__((visibility("default"))) const snug::plugin::Header* snug_cuda_plugin() {
  using snug::cuda::PluginApi;
  static const PluginApi api = [] {
    PluginApi a{};
    a.header = {snug::cuda::kPluginAbiVersion, sizeof(PluginApi), SNUG_VERSION_STRING, &snug::plugin::kHostToken};
#define SNUG_CUDA_PLUGIN_SET(name) a.name = &::snug::cuda::name;
    SNUG_CUDA_PLUGIN_FUNCTIONS(SNUG_CUDA_PLUGIN_SET)
#undef SNUG_CUDA_PLUGIN_SET
#define SNUG_CUDA_PLUGIN_SET(name) a.name = &::snug::distributed::name;
    SNUG_CUDA_PLUGIN_NCCL_FUNCTIONS(SNUG_CUDA_PLUGIN_SET)
#undef SNUG_CUDA_PLUGIN_SET
    return a;
  }();
  return &api.header;
}
