// SPDX-License-Identifier: MIT
// Pooling forward through cuDNN (cudnnPoolingForward): average pooling, and
// max pooling when no argmax indices are wanted (inference, no_grad).
//
// Why not everything: cuDNN's max-pool backward needs the forward's input and
// output kept until backward, where the own kernels (pool.cu) keep an i64
// index per output (a quarter of the input's f32 bytes for 2 x 2 windows), and
// adaptive pooling is not a cuDNN mode. So a max pool that will be
// differentiated, every pooling backward, and adaptive pooling stay on pool.cu;
// docs/cuda.md. Window semantics match the CPU: padding never wins a max, NaN
// propagates, and average windows divide by kernel_h * kernel_w (windows never
// reach past the padded input, so that is PyTorch's count_include_pad).
#include <snug/cuda/cuda_backend.h>
#include <snug/cuda/cudnn_util.h>

// cuDNN 9 marks the pooling calls deprecated in favour of its graph API (as
// for batch norm, cuda/batch_norm.cpp); they ship and are supported.
#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
#endif

namespace snug::cuda {

namespace {

struct PoolDesc {
  cudnnPoolingDescriptor_t d = nullptr;
  explicit PoolDesc(const Pool2dParams& p) {
    SNUG_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&d));
    const cudnnPoolingMode_t mode =
        p.kind == PoolKind::max ? CUDNN_POOLING_MAX : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    SNUG_CUDNN_CHECK(cudnnSetPooling2dDescriptor(d, mode, CUDNN_PROPAGATE_NAN, int(p.kernel[0]), int(p.kernel[1]),
                                                 int(p.padding[0]), int(p.padding[1]), int(p.stride[0]),
                                                 int(p.stride[1])));
  }
  ~PoolDesc() { cudnnDestroyPoolingDescriptor(d); }
  PoolDesc(const PoolDesc&) = delete;
  PoolDesc& operator=(const PoolDesc&) = delete;
};

}  // namespace

bool cudnn_pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices,
                  std::uintptr_t stream) {
  if (p.kind == PoolKind::adaptive_avg || (p.kind == PoolKind::max && indices.defined())) return false;
  const DType t = x.dtype();
  if (t != DType::f32 && t != DType::f16 && t != DType::f64) return false;
  if (out.numel() == 0) return true;
  const LockedCudnn handle = cudnn_for(out.device().index, stream);
  TensorDesc xd(t, x.size(0), x.size(1), x.size(2), x.size(3), "pool2d"),
      yd(t, out.size(0), out.size(1), out.size(2), out.size(3), "pool2d");
  PoolDesc pd(p);
  SNUG_CUDNN_CHECK(
      cudnnPoolingForward(handle.h, pd.d, kOne.get(t), xd.d, x.data_ptr(), kZero.get(t), yd.d, out.data_ptr()));
  return true;
}

}  // namespace snug::cuda
