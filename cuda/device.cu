// placeholder, replaced by the CUDA target work
#include <cuda_runtime.h>
namespace snug::cuda { int device_count_raw() { int n = 0; if (cudaGetDeviceCount(&n) != cudaSuccess) return 0; return n; } }
