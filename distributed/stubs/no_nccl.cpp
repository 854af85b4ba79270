// SPDX-License-Identifier: MIT
// The stand-in for builds without NCCL (no CUDA, SNUG_NCCL=OFF, or NCCL not found).
#include <snug/distributed/nccl.h>

namespace snug::distributed {

bool nccl_available() { return false; }

std::shared_ptr<ProcessGroup> make_nccl_group(const NcclOptions&) {
  throw DistributedError(
      "make_nccl_group: this snug was built without NCCL (it needs a CUDA build with SNUG_NCCL=ON and nccl.h / "
      "libnccl found, e.g. in /usr/local/cuda)");
}

}  // namespace snug::distributed
