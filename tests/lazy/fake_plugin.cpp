// SPDX-License-Identifier: MIT
// Plugins that must be refused (tests/CMakeLists.txt, test_lazy_backends):
// built twice, as a CUDA plugin whose table has another ABI version
// (SNUG_FAKE_WRONG_ABI=1) and as one with the right version and size but
// bound to another copy of libsnug (its host token is its own object, not
// libsnug's plugin::kHostToken). The loader refuses both from the header
// alone, so the rest of the table is never read.
#include <snug/cuda/plugin_api.h>
#include <snug/version.h>

namespace {
const int g_other_token = 0;
}  // namespace

extern "C" __attribute__((visibility("default"))) const snug::plugin::Header* snug_cuda_plugin() {
  static const snug::plugin::Header h{snug::cuda::kPluginAbiVersion + (SNUG_FAKE_WRONG_ABI ? 1000 : 0),
                                      sizeof(snug::cuda::PluginApi), SNUG_VERSION_STRING, &g_other_token};
  return &h;
}
