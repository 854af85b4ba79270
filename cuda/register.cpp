// The one place where the CUDA build meets core/. Compiled only when
// SNUG_WITH_CUDA is on (cuda/no_cuda.cpp stands in otherwise).
//
// What it does today: reports that CUDA is compiled in; device queries, raw
// memory and the elementwise launchers are in device.cu and elementwise.cu,
// reachable through cuda/cuda_api.h.
//
// What it deliberately does not do yet: register a Backend for
// DeviceType::CUDA. core/backend.h's table has about twenty methods (copy,
// reduce, matmul, softmax, random, ...); a backend that implements a few of
// them would make "cuda:0" tensors half-work. Until all of them exist here,
// backend_for(DeviceType::CUDA) keeps throwing its clear DeviceError. When they
// do, this file gains a static registrar:
//   register_backend(DeviceType::CUDA, &cuda_backend())  // only if device_count() > 0
// and the top-level CMakeLists.txt must keep this object in the link (a static
// registrar in a static library is dropped unless something references it).
#include "cuda/cuda_api.h"

namespace snug::cuda {

bool compiled() { return true; }

}  // namespace snug::cuda
