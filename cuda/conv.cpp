// SPDX-License-Identifier: MIT
// CudaBackend::conv2d and conv2d_backward through cuDNN's convolution API.
//
// NOTE [ cuDNN algorithm cache ]
// For each (device, dtype, direction, shapes, geometry) the algorithm is chosen
// once, by cuDNN's heuristics (cudnnGet*Algorithm_v7: the first candidate that
// succeeds within the workspace limit), and kept in a map; later calls with the
// same shapes reuse it without asking again. The workspace each call needs
// comes from the caching allocator (tagged workspace) and goes back right
// after the call: kernels run in order on the default stream, so the next
// user of those bytes runs after cuDNN is done with them.
//
// f16/bf16 convolve with f32 accumulation (compute type f32); f32 uses plain
// FMA math unless TF32 is allowed (cuda::set_allow_tf32), as for matmul.
#include <array>
#include <cstring>
#include <map>
#include <mutex>

#include <snug/cuda/check.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/cudnn_util.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stream.h>

namespace snug::cuda {

namespace {

constexpr std::size_t kMaxWorkspace = std::size_t{1} << 30;  // never pick an algorithm needing more

// RAII descriptors.
struct FilterDesc {
  cudnnFilterDescriptor_t d = nullptr;
  FilterDesc(DType t, int64_t k, int64_t c, int64_t h, int64_t w) {
    SNUG_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d));
    SNUG_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(d, cudnn_type(t, "conv2d"), CUDNN_TENSOR_NCHW, int(k), int(c), int(h), int(w)));
  }
  ~FilterDesc() { cudnnDestroyFilterDescriptor(d); }
};
struct ConvDesc {
  cudnnConvolutionDescriptor_t d = nullptr;
  ConvDesc(DType t, const Conv2dParams& p) {
    SNUG_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d));
    SNUG_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(
        d, int(p.padding[0]), int(p.padding[1]), int(p.stride[0]), int(p.stride[1]), int(p.dilation[0]),
        int(p.dilation[1]), CUDNN_CROSS_CORRELATION, t == DType::f64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
    SNUG_CUDNN_CHECK(cudnnSetConvolutionGroupCount(d, int(p.groups)));
    const cudnnMathType_t math = (t == DType::f16 || t == DType::bf16) ? CUDNN_TENSOR_OP_MATH
                                 : (t == DType::f32 && allow_tf32())   ? CUDNN_DEFAULT_MATH
                                                                       : CUDNN_FMA_MATH;
    SNUG_CUDNN_CHECK(cudnnSetConvolutionMathType(d, math));
  }
  ~ConvDesc() { cudnnDestroyConvolutionDescriptor(d); }
};

// The cache key: every number the algorithm choice depends on.
enum class Direction { forward, backward_data, backward_filter };
using Key = std::array<int64_t, 20>;
Key key_of(Direction dir, int device, DType t, const Shape& x, const Shape& w, const Conv2dParams& p) {
  return {int64_t(dir),
          device,
          int64_t(t),
          allow_tf32(),
          x[0],
          x[1],
          x[2],
          x[3],
          w[0],
          w[2],
          w[3],
          p.stride[0],
          p.stride[1],
          p.padding[0],
          p.padding[1],
          p.dilation[0],
          p.dilation[1],
          p.groups,
          0,
          0};
}
struct Choice {
  int algo = 0;
  std::size_t workspace = 0;
};
std::mutex g_cache_mu;
std::map<Key, Choice> g_cache;  // NOTE [ cuDNN algorithm cache ]

// Picks the first heuristic candidate that succeeded and fits the workspace limit.
template <class Perf>
Choice first_usable(const Perf* perf, int n, const char* what) {
  for (int i = 0; i < n; ++i)
    if (perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= kMaxWorkspace)
      return Choice{int(perf[i].algo), perf[i].memory};
  throw DeviceError(str("cuDNN found no usable ", what, " algorithm for this convolution"));
}

template <class F>
Choice cached(const Key& k, F&& choose) {
  {
    std::lock_guard<std::mutex> lock(g_cache_mu);
    auto it = g_cache.find(k);
    if (it != g_cache.end()) return it->second;
  }
  const Choice c = choose();
  std::lock_guard<std::mutex> lock(g_cache_mu);
  g_cache.emplace(k, c);
  return c;
}

// Workspace from the caching allocator for the duration of one cuDNN call.
struct Workspace {
  Device d;
  void* p = nullptr;
  Workspace(Device dev, std::size_t bytes) : d(dev) {
    if (bytes) {
      memory::TagScope tag(memory::Tag::workspace);
      p = memory::allocate(d, bytes, memory::current_stream(d));  // the pool of the stream the call runs on
    }
  }
  ~Workspace() { memory::deallocate(d, p); }
};

}  // namespace

// x (N, C, H, W), weight (Cout, C/G, kH, kW), bias (Cout) or undefined -> out (N, Cout, Ho, Wo); contiguous.
void CudaBackend::conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                         const Tensor& out) {
  if (out.numel() == 0) return;
  const int dev = out.device().index;
  OnDevice guard(dev);
  const DType t = out.dtype();
  const LockedCudnn handle = cudnn_for(dev, guard.stream());
  cudnnHandle_t h = handle.h;
  TensorDesc xd(t, x.size(0), x.size(1), x.size(2), x.size(3)),
      yd(t, out.size(0), out.size(1), out.size(2), out.size(3));
  FilterDesc wd(t, weight.size(0), weight.size(1), weight.size(2), weight.size(3));
  ConvDesc cd(t, p);
  const Choice c = cached(key_of(Direction::forward, dev, t, x.shape(), weight.shape(), p), [&] {
    cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
    int n = 0;
    SNUG_CUDNN_CHECK(
        cudnnGetConvolutionForwardAlgorithm_v7(h, xd.d, wd.d, cd.d, yd.d, CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &n, perf));
    return first_usable(perf, n, "forward");
  });
  Workspace ws(out.device(), c.workspace);
  SNUG_CUDNN_CHECK(cudnnConvolutionForward(h, kOne.get(t), xd.d, x.data_ptr(), wd.d, weight.data_ptr(), cd.d,
                                           cudnnConvolutionFwdAlgo_t(c.algo), ws.p, c.workspace, kZero.get(t), yd.d,
                                           out.data_ptr()));
  if (bias.defined()) {
    TensorDesc bd(t, 1, bias.size(0), 1, 1);
    SNUG_CUDNN_CHECK(cudnnAddTensor(h, kOne.get(t), bd.d, bias.data_ptr(), kOne.get(t), yd.d, out.data_ptr()));
  }
}

// grad_out (N, Cout, Ho, Wo) -> grad_x like x, grad_weight like weight, grad_bias (Cout); each optional.
void CudaBackend::conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                                  const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  const int dev = grad_out.device().index;
  OnDevice guard(dev);
  if (grad_out.numel() == 0) {  // nothing flows back: every gradient is zero
    for (const Tensor* g : {&grad_x, &grad_weight, &grad_bias})
      if (g->defined()) fill(*g, 0);
    return;
  }
  const DType t = grad_out.dtype();
  const LockedCudnn handle = cudnn_for(dev, guard.stream());
  cudnnHandle_t h = handle.h;
  const Tensor& xs = x.defined() ? x : grad_x;
  const Tensor& ws_t = weight.defined() ? weight : grad_weight;
  TensorDesc xd(t, xs.size(0), xs.size(1), xs.size(2), xs.size(3));
  TensorDesc yd(t, grad_out.size(0), grad_out.size(1), grad_out.size(2), grad_out.size(3));
  FilterDesc wd(t, ws_t.size(0), ws_t.size(1), ws_t.size(2), ws_t.size(3));
  ConvDesc cd(t, p);
  if (grad_x.defined()) {
    const Choice c = cached(key_of(Direction::backward_data, dev, t, xs.shape(), ws_t.shape(), p), [&] {
      cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
      int n = 0;
      SNUG_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, wd.d, yd.d, cd.d, xd.d,
                                                                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &n, perf));
      return first_usable(perf, n, "backward-data");
    });
    Workspace ws(grad_out.device(), c.workspace);
    SNUG_CUDNN_CHECK(cudnnConvolutionBackwardData(h, kOne.get(t), wd.d, weight.data_ptr(), yd.d, grad_out.data_ptr(),
                                                  cd.d, cudnnConvolutionBwdDataAlgo_t(c.algo), ws.p, c.workspace,
                                                  kZero.get(t), xd.d, grad_x.data_ptr()));
  }
  if (grad_weight.defined()) {
    const Choice c = cached(key_of(Direction::backward_filter, dev, t, xs.shape(), ws_t.shape(), p), [&] {
      cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
      int n = 0;
      SNUG_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
          h, xd.d, yd.d, cd.d, wd.d, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &n, perf));
      return first_usable(perf, n, "backward-filter");
    });
    Workspace ws(grad_out.device(), c.workspace);
    SNUG_CUDNN_CHECK(cudnnConvolutionBackwardFilter(h, kOne.get(t), xd.d, x.data_ptr(), yd.d, grad_out.data_ptr(), cd.d,
                                                    cudnnConvolutionBwdFilterAlgo_t(c.algo), ws.p, c.workspace,
                                                    kZero.get(t), wd.d, grad_weight.data_ptr()));
  }
  if (grad_bias.defined()) {
    TensorDesc bd(t, 1, grad_bias.size(0), 1, 1);
    SNUG_CUDNN_CHECK(cudnnConvolutionBackwardBias(h, kOne.get(t), yd.d, grad_out.data_ptr(), kZero.get(t), bd.d,
                                                  grad_bias.data_ptr()));
  }
}

}  // namespace snug::cuda
