// SPDX-License-Identifier: MIT
// The NCCL backend's entry point (plain C++: nccl.h and the CUDA headers stay
// inside cuda/nccl/nccl_group.cpp). Built in CUDA builds when CMake's
// SNUG_NCCL is on and NCCL is found; otherwise distributed/stubs/no_nccl.cpp says so.
#pragma once
#include <chrono>
#include <memory>
#include <string>

#include <snug/distributed/process_group.h>

namespace snug::distributed {

struct NcclOptions {
  int device = 0;  // the CUDA device this rank uses (cuda:device); usually WorldInfo::local_rank
  // How NCCL's unique id gets from rank 0 to the others (128 bytes, once):
  // through `bootstrap` (e.g. the MPI group of the same job), else through
  // `rendezvous_file` on a file system every rank sees (rank 0 writes it
  // atomically, the others wait for it; use a fresh path per job).
  std::shared_ptr<ProcessGroup> bootstrap;
  std::string rendezvous_file;
  // Without bootstrap: this rank and the world size (-1: from detect_world()).
  int rank = -1, size = -1;
  std::chrono::milliseconds timeout{0};  // 0: default_timeout()
};

// A group whose collectives run on the device's tensors on a stream of its
// own (ordered after the work already queued on the device); Work::wait
// polls the collective's event until the timeout (then aborts the NCCL
// communicator and throws DistributedTimeoutError). Tensors must be on
// cuda:device. A world of one needs neither bootstrap nor file.
std::shared_ptr<ProcessGroup> make_nccl_group(const NcclOptions& opt);

}  // namespace snug::distributed
