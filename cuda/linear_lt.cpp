// SPDX-License-Identifier: MIT
// CudaBackend::linear_act, linear_backward and linear_backward_act through
// cuBLASLt: a Linear's bias, tanh GELU and bias gradient ride in the GEMM's
// epilogue instead of running as kernels of their own.
//
// NOTE [ Linear through cuBLASLt ]
// A Linear's three GEMMs (cuda/lt_plan.h maps each onto a column-major call,
// as NOTE [ Row-major matmul through cuBLAS ] does for matmul):
//   forward   out = act(x W^T + b)   BIAS, RELU_BIAS, GELU_BIAS; with the
//             pre-activation kept for backward, GELU_AUX_BIAS writes it as
//             the aux matrix in the same pass
//   dgrad     gz = (g W) * gelu'(z)  DGELU, reading z as the aux matrix
//   wgrad     gW = g^T x, gb = sum of g's rows    BGRADB: the bias gradient
//             is reduced from the operand the GEMM streams anyway, so no
//             column-sum kernel runs
// cuBLASLt's GELU is the tanh approximation: the exact GELU (and ReLU with its
// pre-activation wanted, whose aux is a bit mask) takes the BIAS epilogue and
// its elementwise kernel after. f16, bf16 and f32 (TF32 when allowed, as for
// matmul) go through cuBLASLt; f64, operands neither row- nor column-major,
// and any call whose heuristic offers no algorithm take Backend's composed
// default (cuBLAS and the elementwise kernels) for the part not done, so the
// result never depends on which ran beyond rounding. The descriptors and the
// algorithm are made once per LtKey (shapes, dtype, epilogue, alignments) and
// cached, a refusal too: a small model's step is bound by the host's time per
// launch (W-GPT's runs about 50 of these GEMMs), so a call only sets its bias
// and aux pointers and launches.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <memory>
#include <mutex>
#include <optional>
#include <utility>
#include <unordered_map>

#include <snug/core/activation_ops.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/check.h>
#include <snug/cuda/cublas_check.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/lt_plan.h>

namespace snug::cuda {

namespace {

constexpr int kMaxDevices = 64;

cublasLtHandle_t lt_handle(int device) {
  static std::mutex mu;
  static cublasLtHandle_t handles[kMaxDevices] = {};
  SNUG_CHECK(device >= 0 && device < kMaxDevices, DeviceError, "cuBLASLt: device index ", device, " out of range");
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[device]) SNUG_CUBLAS_CHECK(cublasLtCreate(&handles[device]));
  return handles[device];
}

cublasLtEpilogue_t to_cublas(LtEpilogue e) {
  switch (e) {
    case LtEpilogue::none:
      return CUBLASLT_EPILOGUE_DEFAULT;
    case LtEpilogue::bias:
      return CUBLASLT_EPILOGUE_BIAS;
    case LtEpilogue::relu:
      return CUBLASLT_EPILOGUE_RELU;
    case LtEpilogue::relu_bias:
      return CUBLASLT_EPILOGUE_RELU_BIAS;
    case LtEpilogue::gelu:
      return CUBLASLT_EPILOGUE_GELU;
    case LtEpilogue::gelu_bias:
      return CUBLASLT_EPILOGUE_GELU_BIAS;
    case LtEpilogue::gelu_aux:
      return CUBLASLT_EPILOGUE_GELU_AUX;
    case LtEpilogue::gelu_aux_bias:
      return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
    case LtEpilogue::dgelu:
      return CUBLASLT_EPILOGUE_DGELU;
    case LtEpilogue::bgradb:
      return CUBLASLT_EPILOGUE_BGRADB;
  }
  return CUBLASLT_EPILOGUE_DEFAULT;
}

bool has_aux(LtEpilogue e) {
  return e == LtEpilogue::gelu_aux || e == LtEpilogue::gelu_aux_bias || e == LtEpilogue::dgelu;
}

// The dtypes cuBLASLt serves here, and how.
bool lt_dtype(DType t, cudaDataType_t& dt) {
  switch (t) {
    case DType::f32:
      dt = CUDA_R_32F;
      return true;
    case DType::f16:
      dt = CUDA_R_16F;
      return true;
    case DType::bf16:
      dt = CUDA_R_16BF;
      return true;
    default:
      return false;
  }
}

// One cuBLASLt GEMM: D (m, n) = epilogue(op(A) op(B)), A = the b operand's
// memory, B = the a operand's (gemm_plan.h). bias: the epilogue's bias (read)
// or bias gradient (written); aux: its aux matrix (ld = aux_ld).
struct LtCall {
  int device = 0;
  std::uintptr_t stream = 0;
  DType dtype = DType::f32;
  GemmPlan g;
  LtEpilogue epilogue = LtEpilogue::none;
  const void* a_mem = nullptr;  // the row-major a operand's memory (cuBLAS's B)
  const void* b_mem = nullptr;  // the row-major b operand's memory (cuBLAS's A)
  void* d = nullptr;
  void* bias = nullptr;
  void* aux = nullptr;
  int64_t aux_ld = 0;
};

template <class T, cublasStatus_t (*Destroy)(T)>
struct LtObject {
  T h = nullptr;
  LtObject() = default;
  LtObject(const LtObject&) = delete;
  LtObject& operator=(const LtObject&) = delete;
  ~LtObject() {
    if (h) Destroy(h);
  }
};

template <class V>
void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attr, const V& v) {
  SNUG_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc, attr, &v, sizeof(v)));
}

// Everything a key's calls share, made once: the descriptors (all but the
// bias and aux pointers, set per call under the entry's lock) and the
// algorithm (none: cuBLASLt offered none, and every call of the key falls back).
struct LtPlan {
  std::mutex mu;
  LtObject<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy> desc;
  LtObject<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy> la, lb, ld;
  std::optional<cublasLtMatmulAlgo_t> algo;
};

struct PlanCache {
  std::mutex mu;
  std::unordered_map<LtKey, std::unique_ptr<LtPlan>, LtKeyHash> plans;
};
PlanCache& plan_cache() {
  static PlanCache c;
  return c;
}

// The descriptors and algorithm of key (c supplies the pointers the heuristic
// reads the alignment of); made under the cache's lock on first use.
std::unique_ptr<LtPlan> make_plan(const LtKey& key, const LtCall& c, cudaDataType_t dt, cublasLtHandle_t handle,
                                  std::size_t ws_bytes) {
  auto p = std::make_unique<LtPlan>();
  const GemmPlan& g = c.g;
  const cublasComputeType_t ct = key.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  SNUG_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc.h, ct, CUDA_R_32F));
  const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSA, ta);
  set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_TRANSB, tb);
  set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE, to_cublas(c.epilogue));
  if (c.bias) {
    set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
    set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(dt));
  }
  if (has_aux(c.epilogue)) {
    set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
    set_desc(p->desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, c.aux_ld);
  }
  // Layouts, column-major: A is (m, k) after its op, B (k, n), D (m, n).
  SNUG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->la.h, dt, g.trans_a ? g.k : g.m, g.trans_a ? g.m : g.k, g.lda));
  SNUG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->lb.h, dt, g.trans_b ? g.n : g.k, g.trans_b ? g.k : g.n, g.ldb));
  SNUG_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->ld.h, dt, g.m, g.n, g.ldc));

  LtObject<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy> pref;
  SNUG_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref.h));
  const uint64_t wsb = ws_bytes;
  SNUG_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref.h, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)));
  const uint32_t al_a = key.align_a, al_b = key.align_b, al_c = key.align_c;
  for (auto [attr, v] : {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c},
                         {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c}})
    SNUG_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(pref.h, attr, v, sizeof(*v)));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  // A refusal is a status (NOT_SUPPORTED, INVALID_VALUE for an epilogue this
  // GPU or layout lacks) or zero results: either way, no algorithm.
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle, p->desc.h, p->la.h, p->lb.h, p->ld.h, p->ld.h, pref.h, 1, &result, &found);
  if (st == CUBLAS_STATUS_SUCCESS && found > 0 && result.state == CUBLAS_STATUS_SUCCESS) p->algo = result.algo;
  return p;
}

// Runs c, or returns false (having queued nothing) when cuBLASLt has no
// algorithm for it.
bool lt_matmul(const LtCall& c) {
  cudaDataType_t dt;
  if (!lt_dtype(c.dtype, dt)) return false;
  const GemmPlan& g = c.g;
  if (g.m > INT32_MAX || g.n > INT32_MAX || g.k > INT32_MAX) return false;
  LtKey key;
  key.device = c.device, key.dtype = c.dtype, key.tf32 = c.dtype == DType::f32 && tf32_here();
  key.epilogue = c.epilogue, key.trans_a = g.trans_a, key.trans_b = g.trans_b;
  key.m = g.m, key.n = g.n, key.k = g.k, key.lda = g.lda, key.ldb = g.ldb, key.ldc = g.ldc, key.aux_ld = c.aux_ld;
  key.align_a = lt_alignment(c.b_mem), key.align_b = lt_alignment(c.a_mem), key.align_c = lt_alignment(c.d);
  key.align_bias = lt_alignment(c.bias), key.align_aux = lt_alignment(c.aux);

  const GemmWorkspace ws = gemm_workspace(c.device, c.stream);
  const cublasLtHandle_t handle = lt_handle(c.device);
  LtPlan* plan;
  {
    PlanCache& cache = plan_cache();
    std::lock_guard<std::mutex> lock(cache.mu);
    std::unique_ptr<LtPlan>& slot = cache.plans[key];
    if (!slot) slot = make_plan(key, c, dt, handle, ws.bytes);
    plan = slot.get();  // entries live for the process
  }
  if (!plan->algo) return false;
  std::lock_guard<std::mutex> lock(plan->mu);  // the pointer attributes are this call's
  if (c.bias) set_desc(plan->desc.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER, c.bias);
  if (has_aux(c.epilogue)) set_desc(plan->desc.h, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, c.aux);
  const float one = 1.0f, zero = 0.0f;
  SNUG_CUBLAS_CHECK(cublasLtMatmul(handle, plan->desc.h, &one, c.b_mem, plan->la.h, c.a_mem, plan->lb.h, &zero,
                                     c.d, plan->ld.h, c.d, plan->ld.h, &*plan->algo, ws.ptr, ws.bytes,
                                     reinterpret_cast<cudaStream_t>(c.stream)));
  return true;
}

// A 2-D tensor's strides as lt_plan.h takes them.
struct Strides2 {
  int64_t s[2];
};
Strides2 strides_of(const Tensor& t) { return {{t.stride(0), t.stride(1)}}; }

bool lt_serves(DType t) {
  cudaDataType_t dt;
  return lt_dtype(t, dt);
}

}  // namespace

// x (N, in), weight (out, in), bias (out) or undefined -> out (N, out), pre (N, out) or undefined.
void CudaBackend::linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act,
                             const Tensor& out, const Tensor& pre) {
  const int64_t N = x.size(0), in = x.size(1), outf = weight.size(0);
  if (!lt_serves(out.dtype()) || out.numel() == 0 || in == 0 || (bias.defined() && bias.stride(0) != 1))
    return Backend::linear_act(x, weight, bias, act, out, pre);
  const LtGemm plan = plan_linear_forward(N, in, outf, strides_of(x).s, strides_of(weight).s);
  if (!plan.ok) return Backend::linear_act(x, weight, bias, act, out, pre);
  const LtForward f =
      choose_lt_forward(static_cast<LtAct>(act), bias.defined(), pre.defined(), lt_aux_ld_ok(plan.plan.ldc));
  OnDevice guard(out.device().index);
  LtCall c;
  c.device = out.device().index, c.stream = guard.stream(), c.dtype = out.dtype(), c.g = plan.plan;
  c.epilogue = f.epilogue;
  c.a_mem = x.data_ptr(), c.b_mem = weight.data_ptr();
  const Tensor& d = f.into_pre ? pre : out;
  c.d = d.data_ptr();
  c.bias = bias.defined() ? bias.data_ptr() : nullptr;
  if (has_aux(f.epilogue)) c.aux = pre.data_ptr(), c.aux_ld = plan.plan.ldc;
  if (!lt_matmul(c)) return Backend::linear_act(x, weight, bias, act, out, pre);
  if (f.act_after) unary(activation_unary(act), 0.0, 0.0, d, out);  // d may be out: elementwise, in place is safe
  if (f.copy_after) copy(out, pre);
}

// grad_out (N, out) -> grad_x (N, in), grad_weight (out, in), grad_bias (out), each undefined when not wanted.
void CudaBackend::linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                                  const Tensor& grad_weight, const Tensor& grad_bias) {
  if (!lt_serves(grad_out.dtype()) || grad_out.numel() == 0)
    return Backend::linear_backward(grad_out, x, weight, grad_x, grad_weight, grad_bias);
  const int64_t N = grad_out.size(0), outf = grad_out.size(1);
  const int64_t in = grad_x.defined() ? grad_x.size(1) : grad_weight.defined() ? grad_weight.size(1) : 0;
  OnDevice guard(grad_out.device().index);
  LtCall c;
  c.device = grad_out.device().index, c.stream = guard.stream(), c.dtype = grad_out.dtype();
  bool gx_done = !grad_x.defined(), gw_done = !grad_weight.defined(), gb_done = !grad_bias.defined();
  if (!gx_done && in > 0) {
    const LtGemm plan = plan_linear_dgrad(N, in, outf, strides_of(grad_out).s, strides_of(weight).s);
    if (plan.ok) {
      c.g = plan.plan, c.epilogue = LtEpilogue::none;
      c.a_mem = grad_out.data_ptr(), c.b_mem = weight.data_ptr(), c.d = grad_x.data_ptr();
      gx_done = lt_matmul(c);
    }
  }
  if (!gw_done && in > 0) {
    const LtGemm plan = plan_linear_wgrad(N, in, outf, strides_of(grad_out).s, strides_of(x).s);
    if (plan.ok) {
      c.g = plan.plan;
      c.a_mem = grad_out.data_ptr(), c.b_mem = x.data_ptr(), c.d = grad_weight.data_ptr();
      const bool bgrad = !gb_done && grad_bias.stride(0) == 1;
      if (bgrad) {
        c.epilogue = LtEpilogue::bgradb, c.bias = grad_bias.data_ptr();
        gw_done = gb_done = lt_matmul(c);
      }
      if (!gw_done) {  // without the bias gradient (or cuBLASLt has no BGRADB for this case)
        c.epilogue = LtEpilogue::none, c.bias = nullptr;
        gw_done = lt_matmul(c);
      }
    }
  }
  if (gx_done && gw_done && gb_done) return;
  Backend::linear_backward(grad_out, gw_done ? Tensor() : x, gx_done ? Tensor() : weight,
                           gx_done ? Tensor() : grad_x, gw_done ? Tensor() : grad_weight,
                           gb_done ? Tensor() : grad_bias);
}

// grad_z (N, in) = (grad_out (N, out) W (out, in)) * act'(z (N, in)).
void CudaBackend::linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                                      const Tensor& grad_z) {
  const int64_t N = grad_out.size(0), outf = grad_out.size(1), in = grad_z.size(1);
  if (!lt_serves(grad_z.dtype()) || grad_z.numel() == 0 || outf == 0)
    return Backend::linear_backward_act(grad_out, weight, act, z, grad_z);
  const LtGemm plan = plan_linear_dgrad(N, in, outf, strides_of(grad_out).s, strides_of(weight).s);
  if (!plan.ok || act == Activation::none) return Backend::linear_backward_act(grad_out, weight, act, z, grad_z);
  OnDevice guard(grad_z.device().index);
  LtCall c;
  c.device = grad_z.device().index, c.stream = guard.stream(), c.dtype = grad_z.dtype(), c.g = plan.plan;
  c.epilogue = choose_lt_backward_act(static_cast<LtAct>(act), lt_aux_ld_ok(in) && z.stride(0) == in);
  c.a_mem = grad_out.data_ptr(), c.b_mem = weight.data_ptr(), c.d = grad_z.data_ptr();
  if (has_aux(c.epilogue)) c.aux = const_cast<void*>(z.data_ptr()), c.aux_ld = in;
  for (;;) {
    if (lt_matmul(c)) {
      if (c.epilogue == LtEpilogue::none) binary(activation_derivative(act), grad_z, z, grad_z);  // in place: safe
      return;
    }
    if (c.epilogue == LtEpilogue::none) break;
    // No DGELU for this case: the plain GEMM, then the derivative.
    c.epilogue = LtEpilogue::none, c.aux = nullptr, c.aux_ld = 0;
  }
  Backend::linear_backward_act(grad_out, weight, act, z, grad_z);
}

}  // namespace snug::cuda
