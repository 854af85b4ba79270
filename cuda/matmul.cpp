// SPDX-License-Identifier: MIT
// CudaBackend::matmul through cuBLAS: one strided-batched GEMM per call
// (cublasGemmStridedBatchedEx), operands passed as transposes where their
// layout allows (cuda/gemm_plan.h, NOTE [ Row-major matmul through cuBLAS ]).
//   f32:       CUBLAS_COMPUTE_32F, or 32F_FAST_TF32 when set_allow_tf32(true) or
//              inside a Tf32Scope (cuda/cuda_backend.h) on this thread
//   f16/bf16:  stored in 16 bits, accumulated in f32 (CUBLAS_COMPUTE_32F)
//   f64:       CUBLAS_COMPUTE_64F
// Each device's handle gets a workspace per stream from the caching allocator
// (tagged workspace), so cuBLAS never calls cudaMalloc behind the allocator's
// back. GEMMs are queued on the device's current stream (memory/stream.h).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <map>
#include <mutex>

#include <snug/core/raw_ops.h>
#include <snug/cuda/check.h>
#include <snug/cuda/cublas_check.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/gemm_plan.h>
#include <snug/memory/allocator.h>

namespace snug::cuda {

namespace {

constexpr std::size_t kWorkspaceBytes = std::size_t{32} << 20;  // what cuBLAS suggests for Hopper
constexpr int kMaxHandles = 64;

// One handle per device, created on first use and kept for the process. It
// is pointed at the calling thread's current stream before each GEMM, with a
// workspace of that stream's own (cuBLAS wants one workspace per stream, as
// two streams may run GEMMs at once): allocated from the caching allocator's
// pool for that stream on first use and kept for the process. The handle's
// lock is held across setting the stream and queueing the GEMM, so threads
// on different streams do not re-point it under each other.
struct HandleState {
  cublasHandle_t h = nullptr;
  bool bound = false;
  std::uintptr_t stream = 0;                   // the stream the handle is set to, once bound
  std::map<std::uintptr_t, void*> workspaces;  // per stream
};

struct LockedHandle {
  std::unique_lock<std::mutex> lock;
  cublasHandle_t h;
};

std::mutex g_mu[kMaxHandles];
HandleState g_handles[kMaxHandles];

// The stream's workspace of device's state, allocated on first use; under the device's lock.
void* workspace_locked(HandleState& hs, int device, std::uintptr_t stream) {
  void*& ws = hs.workspaces[stream];
  if (!ws) {
    memory::TagScope tag(memory::Tag::workspace);
    memory::OpScope op("cublas_workspace");
    ws = memory::allocate(Device(DeviceType::CUDA, device), kWorkspaceBytes, stream);
  }
  return ws;
}

LockedHandle handle_for(int device, std::uintptr_t stream) {
  SNUG_CHECK(device >= 0 && device < kMaxHandles, DeviceError, "cuBLAS: device index ", device, " out of range");
  std::unique_lock<std::mutex> lock(g_mu[device]);
  HandleState& hs = g_handles[device];
  if (!hs.h) SNUG_CUBLAS_CHECK(cublasCreate(&hs.h));
  if (!hs.bound || hs.stream != stream) {
    void* ws = workspace_locked(hs, device, stream);
    // cublasSetStream puts the handle back on cuBLAS's own workspace, so the
    // workspace is set after it.
    SNUG_CUBLAS_CHECK(cublasSetStream(hs.h, reinterpret_cast<cudaStream_t>(stream)));
    SNUG_CUBLAS_CHECK(cublasSetWorkspace(hs.h, ws, kWorkspaceBytes));
    hs.stream = stream;
    hs.bound = true;
  }
  return {std::move(lock), hs.h};
}

GemmOperandPlan plan_operand(const Tensor& t) { return plan_gemm_operand(t.shape().data(), t.strides().data()); }

}  // namespace

// set_allow_tf32 / allow_tf32 are libsnug's (cuda/plugin_loader.cpp): the
// switch works without loading this plugin.
namespace {
thread_local bool t_tf32_scope = false;
}
Tf32Scope::Tf32Scope(bool on) : prev_(t_tf32_scope) { t_tf32_scope = prev_ || on; }
Tf32Scope::~Tf32Scope() { t_tf32_scope = prev_; }
bool tf32_here() { return allow_tf32() || t_tf32_scope; }

GemmWorkspace gemm_workspace(int device, std::uintptr_t stream) {
  SNUG_CHECK(device >= 0 && device < kMaxHandles, DeviceError, "cuBLAS: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(g_mu[device]);
  return {workspace_locked(g_handles[device], device, stream), kWorkspaceBytes};
}

// a (B,M,K), b (B,K,N) -> out (B,M,N) contiguous.
void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t B = out.size(0), M = out.size(1), N = out.size(2), K = a.size(2);
  if (out.numel() == 0) return;
  if (K == 0) {
    fill(out, 0);
    return;
  }
  OnDevice guard(out.device().index);
  Tensor ac = a, bc = b;
  GemmOperandPlan pa = plan_operand(ac), pb = plan_operand(bc);
  if (!pa.ok) {
    ac = raw::contiguous(a);
    pa = plan_operand(ac);
  }
  if (!pb.ok) {
    bc = raw::contiguous(b);
    pb = plan_operand(bc);
  }
  const GemmPlan g = plan_gemm(B, M, N, K, pa, pb);
  cudaDataType_t dt;
  cublasComputeType_t ct;
  const float alpha32 = 1.0f, beta32 = 0.0f;
  const double alpha64 = 1.0, beta64 = 0.0;
  const void* alpha = &alpha32;
  const void* beta = &beta32;
  switch (out.dtype()) {
    case DType::f32:
      dt = CUDA_R_32F;
      ct = tf32_here() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::f16:
      dt = CUDA_R_16F;
      ct = CUBLAS_COMPUTE_32F;
      break;
    case DType::bf16:
      dt = CUDA_R_16BF;
      ct = CUBLAS_COMPUTE_32F;
      break;
    case DType::f64:
      dt = CUDA_R_64F;
      ct = CUBLAS_COMPUTE_64F;
      alpha = &alpha64;
      beta = &beta64;
      break;
    default:
      throw DTypeError(str("matmul: expected a floating dtype (f32, f64, f16, bf16), got ", dtype_name(out.dtype())));
  }
  SNUG_CHECK(g.m <= INT32_MAX && g.n <= INT32_MAX && g.k <= INT32_MAX && g.batch <= INT32_MAX && g.lda <= INT32_MAX &&
                 g.ldb <= INT32_MAX,
             ShapeError, "matmul: sizes beyond cuBLAS's 32-bit dimensions (", B, " x ", M, " x ", K, " x ", N, ")");
  // A' = b's memory, B' = a's memory (NOTE [ Row-major matmul through cuBLAS ]).
  const LockedHandle handle = handle_for(out.device().index, guard.stream());
  SNUG_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle.h, g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, int(g.m), int(g.n),
      int(g.k), alpha, bc.data_ptr(), dt, int(g.lda), g.stride_a, ac.data_ptr(), dt, int(g.ldb), g.stride_b, beta,
      out.data_ptr(), dt, int(g.ldc), g.stride_c, int(g.batch), ct, CUBLAS_GEMM_DEFAULT));
}

}  // namespace snug::cuda
