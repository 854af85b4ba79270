// SPDX-License-Identifier: MIT
// The backend table: core/ calls these through the tensor's device type, so
// no #ifdef SNUG_CUDA appears outside cuda/ and the one place that registers
// it. Kernels receive outputs already allocated with the right shape and
// dtype; checks of shapes/dtypes/devices happen once, in core/raw_ops.cpp.
//
// Conventions: `out` is written, never read (unless the method says so);
// inputs may be strided and broadcast (stride 0); shapes are in comments.
#pragma once
#include <cstdint>
#include <vector>

#include <snug/core/functors.h>
#include <snug/core/philox.h>
#include <snug/core/pool_window.h>
#include <snug/core/tensor.h>
#include <snug/core/update_math.h>

namespace snug {

enum class RandomKind { uniform, normal };

// Geometry of a 2-D convolution (index 0 = height, 1 = width). Output sizes
// follow PyTorch: Ho = (H + 2 padding - dilation (kH - 1) - 1) / stride + 1.
// NOTE [ Attention masks ]
// Which keys a query row of self-attention sees; the convention is PyTorch's,
// everywhere in snug (nn::MultiheadAttention, data::pad_collate's
// padding_mask): true means masked out.
//   causal       row i sees keys j <= i only;
//   key_padding  undefined, or (B, T) bool: true at the keys (padding
//                positions) no row sees;
//   mask         undefined, or a tensor of (B, heads, T, T) elements, usually a
//                broadcast view of a (T, T) or (B, 1, T, T) one (stride 0 where
//                it broadcasts): bool, true = masked out, or floating, added to
//                the scaled scores (-inf masks out).
// A row that sees no key at all gives zeros (PyTorch's attention gives zeros
// there too since 2.5), not NaN.
struct AttentionMask {
  bool causal = false;
  Tensor key_padding;
  Tensor mask;
  bool any() const { return causal || key_padding.defined() || mask.defined(); }
};

struct Conv2dParams {
  int64_t stride[2] = {1, 1};
  int64_t padding[2] = {0, 0};
  int64_t dilation[2] = {1, 1};
  int64_t groups = 1;
};

// PoolKind and Pool2dParams, the geometry of a 2-D pooling window: core/pool_window.h.

struct Backend {
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // dst[...] = src[...] converting dtype; src is broadcast to dst's shape.
  // Both on this backend's device type.
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;
  // out = op(x); x and out have the same shape and dtype.
  virtual void unary(UnaryOp op, double a, double b, const Tensor& x, const Tensor& out) = 0;
  // out = op(a, b); a, b broadcast to out's shape and share out's dtype.
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out (bool) = a <op> b; a and b share a dtype, broadcast to out's shape.
  virtual void compare(CompareOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out = cond ? a : b; cond is bool; all broadcast to out.
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // out has x's shape with the reduced dims set to 1 (keepdim form).
  virtual void reduce(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, const Tensor& out) = 0;
  // out (i64) has x's shape with `dim` set to 1: index of the max (or min).
  virtual void arg_reduce(bool is_max, const Tensor& x, int64_t dim, const Tensor& out) = 0;
  // a (B,M,K) @ b (B,K,N) -> out (B,M,N), out contiguous; a/b any strides.
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  // Softmax or log-softmax of x along dim; out like x, contiguous.
  virtual void softmax(const Tensor& x, int64_t dim, bool log, const Tensor& out) = 0;
  // Gradient of (log)softmax: from grad_out and the forward output y.
  virtual void softmax_backward(const Tensor& grad_out, const Tensor& y, int64_t dim, bool log,
                                const Tensor& grad_in) = 0;
  // out = x.index_select(dim, index); index is i64 1-D, already bounds-checked.
  virtual void index_select(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out[.., i, ..] += src[.., j, ..] for index[j] = i along dim (out is read).
  virtual void index_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // out = gather(x, dim, index); index is i64 with out's shape.
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // out[index[i]] along dim += src[i] (out is read).
  virtual void scatter_add(const Tensor& out, int64_t dim, const Tensor& index, const Tensor& src) = 0;
  // Fills out (contiguous, floating) from the Philox stream: element i uses the
  // counter mapping documented in core/philox.h, so every device agrees.
  virtual void random(RandomKind kind, PhiloxState state, double a, double b, const Tensor& out) = 0;
  // Layer norm over the last dim. x (R, C) contiguous; weight/bias (C) or
  // undefined; out (R, C) like x; mean/rstd (R) f32, saved for backward.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps, const Tensor& out,
                          const Tensor& mean, const Tensor& rstd) = 0;
  // grad_out (R, C) -> grad_x (R, C), grad_weight/grad_bias (C) (undefined when not wanted).
  virtual void layer_norm_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;
  // Causal softmax of scale * x over the last dim. x (..., Tq, Tk)
  // contiguous; row i sees columns j <= i + (Tk - Tq), the rest are 0 in
  // out. No mask tensor is built.
  virtual void causal_softmax(const Tensor& x, double scale, const Tensor& out) = 0;
  // 2-D convolution (cross-correlation). x (N, C, H, W), weight (Cout, C/groups,
  // kH, kW), bias (Cout) or undefined, all contiguous with out's dtype;
  // out (N, Cout, Ho, Wo) contiguous. Shapes are checked by the caller.
  virtual void conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                      const Tensor& out) {
    throw DeviceError(str("conv2d: not implemented on backend ", name()));
  }
  // grad_out (N, Cout, Ho, Wo) contiguous -> grad_x like x, grad_weight like
  // weight, grad_bias (Cout); each undefined when not wanted (then its input
  // may be undefined too: x is only read for grad_weight, weight for grad_x).
  virtual void conv2d_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Conv2dParams& p,
                               const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
    throw DeviceError(str("conv2d_backward: not implemented on backend ", name()));
  }
  // Pooling over (H, W). x (N, C, H, W) contiguous -> out (N, C, Ho, Wo)
  // contiguous. max: indices (i64, out's shape) gets the argmax as h * W + w
  // within its plane (first maximum; NaN wins); undefined for other kinds.
  virtual void pool2d(const Tensor& x, const Pool2dParams& p, const Tensor& out, const Tensor& indices) {
    throw DeviceError(str("pool2d: not implemented on backend ", name()));
  }
  // grad_out (N, C, Ho, Wo) contiguous -> grad_x (N, C, H, W) contiguous,
  // written whole (zeros where no window reaches). indices as from pool2d.
  virtual void pool2d_backward(const Tensor& grad_out, const Pool2dParams& p, const Tensor& indices,
                               const Tensor& grad_x) {
    throw DeviceError(str("pool2d_backward: not implemented on backend ", name()));
  }

  // ---- fused ops: linear + activation, MLP, attention, conv + ReLU, add + layer norm, dropout, cross-entropy (NOTE [ Fused ops are backend entries ]) --
  // Each has a default composed from the primitives above (core/fused_defaults.cpp). A backend overrides
  // the ones it has a faster kernel for and calls Backend::X where that kernel does not apply (a dtype,
  // a layout, a size it does not take); the caller never checks which runs.

  // What linear_act applies to x W^T + b.
  enum class Activation : int { none, relu, gelu, gelu_tanh };
  // out (N, out) = act(x (N, in) W^T + b): weight (out, in), bias (out) or undefined, all of out's dtype
  // and device; x and weight any strides. pre (N, out) or undefined receives x W^T + b before the
  // activation (what GELU's backward reads). out and pre contiguous.
  virtual void linear_act(const Tensor& x, const Tensor& weight, const Tensor& bias, Activation act, const Tensor& out,
                          const Tensor& pre);
  // The backward of y = x W^T + b from grad_out (N, out) contiguous: grad_x (N, in) = grad_out W,
  // grad_weight (out, in) = grad_out^T x, grad_bias (out) = the sum of grad_out's rows; each undefined
  // when not wanted (x is read only for grad_weight, weight only for grad_x). Outputs contiguous.
  virtual void linear_backward(const Tensor& grad_out, const Tensor& x, const Tensor& weight, const Tensor& grad_x,
                               const Tensor& grad_weight, const Tensor& grad_bias);
  // grad_z (N, in) = (grad_out (N, out) W (out, in)) * act'(z): linear_backward's grad_x times the
  // derivative of the activation (relu, gelu or gelu_tanh) that made the Linear's input from z (N, in).
  // For ReLU, z may be the activation's output instead (same sign). The one-op MLP's backward.
  // grad_out, z and grad_z contiguous.
  virtual void linear_backward_act(const Tensor& grad_out, const Tensor& weight, Activation act, const Tensor& z,
                                   const Tensor& grad_z);
  // Self-attention from the packed projection (NOTE [ Fused attention ] in core/cpu/attention.h).
  // qkv (B, T, 3C) contiguous floating, C = heads * D, q k v its thirds; mask says which keys each
  // query row sees (AttentionMask: causal, key padding, a general mask; NOTE [ Attention masks ]);
  // y (B, T, C) in qkv's dtype; lse (B, heads, T) in promote_types(qkv's dtype, f32): each row's
  // logsumexp of its masked scaled scores, which backward reads (-inf for a row that sees no key:
  // its output and gradients are zeros). All contiguous.
  virtual void attention(const Tensor& qkv, int64_t heads, double scale, const AttentionMask& mask, const Tensor& y,
                         const Tensor& lse);
  // grad_y (B, T, C) contiguous -> grad_qkv (B, T, 3C) contiguous, every element written.
  virtual void attention_backward(const Tensor& qkv, const Tensor& y, const Tensor& lse, const Tensor& grad_y,
                                  int64_t heads, double scale, const AttentionMask& mask, const Tensor& grad_qkv);
  // FLOPs of attention's forward for the profiler (the products over the computed blocks: only the
  // visible ones when causal); backward does 2.5 times as many.
  static double attention_flops(int64_t B, int64_t T, int64_t heads, int64_t D, bool causal);
  // out = relu(conv2d(x, weight, bias)); the arguments are conv2d's.
  virtual void conv2d_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dParams& p,
                           const Tensor& out);
  // conv2d_backward's gradients for grad_out * (y > 0), y being conv2d_relu's output (grad_out's shape).
  virtual void conv2d_relu_backward(const Tensor& grad_out, const Tensor& y, const Tensor& x, const Tensor& weight,
                                    const Conv2dParams& p, const Tensor& grad_x, const Tensor& grad_weight,
                                    const Tensor& grad_bias);
  // The residual add and the layer norm after it, in one pass (a pre-norm transformer block's
  // h = x + r; y = layer_norm(h)): x, r, h, y (R, C) contiguous of one floating dtype; weight, bias
  // (C) or undefined; mean, rstd (R) f32. h is rounded to its dtype before it is normalized, so the
  // values are those of binary add, then layer_norm.
  virtual void add_layer_norm(const Tensor& x, const Tensor& r, const Tensor& weight, const Tensor& bias, double eps,
                              const Tensor& h, const Tensor& y, const Tensor& mean, const Tensor& rstd);
  // The gradient of h, which is both x's and r's: grad_sum (R, C) = grad_h + layer_norm_backward's
  // grad_x from grad_y (grad_h undefined: zero); grad_weight, grad_bias as layer_norm_backward's.
  virtual void add_layer_norm_backward(const Tensor& grad_y, const Tensor& grad_h, const Tensor& h,
                                       const Tensor& weight, const Tensor& mean, const Tensor& rstd,
                                       const Tensor& grad_sum, const Tensor& grad_weight, const Tensor& grad_bias);
  // Dropout with 0 < p < 1 in one pass: keep (x's shape, bool) = uniform_at(state, i) >= p for
  // element i in row-major order (the mask rand() draws from the same state: NOTE [ Philox element
  // mapping ] in core/philox.h, so every device drops the same elements), out = x * m where kept and
  // x * 0 elsewhere, m = 1 / (1 - p) rounded to x's dtype (the values of rand, ge, to_dtype, affine,
  // mul). x, out (like x) and keep contiguous. state reserves ceil(numel / 4) counters.
  virtual void dropout(const Tensor& x, double p, PhiloxState state, const Tensor& out, const Tensor& keep);
  // grad_x = grad_out * (keep ? scale : 0), scale rounded to grad_out's dtype; all contiguous.
  virtual void dropout_backward(const Tensor& grad_out, const Tensor& keep, double scale, const Tensor& grad_x);
  // Cross-entropy over the classes of each row, from the logits in their own dtype (16-bit under
  // autocast: the math is f32 inside, and no f32 copy of the logits is made; NOTE [ Fused
  // cross-entropy ] in core/fused_defaults.cpp). logits (N, C) contiguous floating, C >= 1; target
  // (N) i64 contiguous, each in [0, C) or ignore_index (the caller checked); loss (N) and lse (N)
  // in promote_types(logits' dtype, f32), contiguous:
  //   lse_i  = log sum_c exp(x_ic)
  //   loss_i = (1 - eps) (lse_i - x_i,t_i) + eps (lse_i - mean_c x_ic),  0 for an ignored row.
  virtual void cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index, double smoothing,
                             const Tensor& loss, const Tensor& lse);
  // grad_logits (N, C) in logits' dtype, contiguous, every element written:
  //   w_i (softmax(x_i) - (1 - eps) onehot(t_i) - eps / C),  0 for an ignored row,
  // from w (N) in loss's dtype (the upstream gradient of each row's loss) and forward's lse.
  virtual void cross_entropy_backward(const Tensor& logits, const Tensor& target, const Tensor& lse, const Tensor& w,
                                      int64_t ignore_index, double smoothing, const Tensor& grad_logits);
  // ---- end of fused ops: linear + activation, MLP, attention, conv + ReLU, add + layer norm, dropout, cross-entropy-------------------

  // Copies between devices (at least one on this backend's type). Contiguous.
  virtual void copy_across(const Tensor& src, const Tensor& dst) = 0;
  // copy_across without waiting for it: queued on the current stream
  // (memory::current_stream) of the non-CPU side. The caller keeps src
  // unchanged until that stream has done the copy (raw::to_device_async
  // records a pinned source's block on it). The default copies and waits.
  virtual void copy_across_async(const Tensor& src, const Tensor& dst) { copy_across(src, dst); }
  // Blocks until queued work on device finishes (CPU: no-op).
  virtual void synchronize(Device d) = 0;

  // ---- fused ops: batch norm, optimizer updates, loss-scaler unscale (NOTE [ Composed defaults, fused overrides ]) ----
  // NOTE [ Composed defaults, fused overrides ]
  // Each entry below has a default composed from the primitives above
  // (core/batch_norm.cpp, core/update.cpp), which is the definition: it takes
  // any tensors the formulas make sense for. A backend overrides an entry with
  // a fused kernel for the cases that kernel takes, and hands every other case
  // to the default (Backend::X), so callers (nn/) never test a device, dtype
  // or layout. CPU: the updates and the unscale (core/cpu/update.cpp); its
  // batch norm is the default. CUDA: all of them (cuda/batch_norm.cpp with
  // cuDNN, cuda/update.cpp with the kernels of cuda/update.cu).

  // Batch norm of x (N, C, *), contiguous, per channel over its M = N prod(*)
  // values (the formulas: nn/functional_norm.cpp). weight, bias, running_mean,
  // running_var: (C), any floating dtype, or undefined (weight 1, bias 0; no
  // running statistics). y like x. Statistics are f32 (f64 for f64 x): call it
  // the stats dtype. Training writes y, mean and invstd = 1 / sqrt(biased var
  // + eps) ((C), stats dtype), and updates running_mean/var in place when
  // given: r = (1 - momentum) r + momentum * batch value (unbiased variance).
  virtual void batch_norm_forward_training(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           const Tensor& running_mean, const Tensor& running_var, double momentum,
                                           double eps, const Tensor& y, const Tensor& mean, const Tensor& invstd);
  // Evaluation: y from running_mean and running_var (both defined).
  virtual void batch_norm_forward_inference(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                            const Tensor& running_mean, const Tensor& running_var, double eps,
                                            const Tensor& y);
  // gy (x's shape and dtype, contiguous) -> gx like x, gweight (C) and gbias
  // (C) in their own dtypes; each undefined when not wanted. training: mean
  // and invstd are the training forward's (eps as given to it); otherwise the
  // running mean and 1 / sqrt(running_var + eps) in the stats dtype (then
  // gx = gy weight invstd).
  virtual void batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                   const Tensor& invstd, bool training, double eps, const Tensor& gx,
                                   const Tensor& gweight, const Tensor& gbias);

  // One optimizer step on one parameter, in place (the math:
  // core/update_math.h). p (n) floating, any strides; g (n) any floating
  // dtype (taken in p's); m, v, buf like p (buf undefined without momentum).
  // The fused overrides take contiguous f32 p and state with an f32/f16/bf16
  // g on one device (CPU: any CPU devices, which share host memory) and
  // allocate nothing (NOTE [ Failure-atomic optimizer steps ] in
  // nn/optim/optimizer.cpp); the default allocates temporaries.
  virtual void adam_update(const Tensor& p, const Tensor& g, const Tensor& m, const Tensor& v,
                           const update::AdamArgs& a);
  virtual void sgd_update(const Tensor& p, const Tensor& g, const Tensor& buf, const update::SgdArgs& a);
  // The loss scaler's unscale: out = g * inv, in f32 for f32/f16/bf16 g and
  // f64 for f64 g, and flags[slot] = 1 when an element of out is inf or NaN
  // (flags is left alone otherwise, so it starts at 0). g any strides; out is
  // g itself (f32/f64 g: in place) or an f32 tensor of g's shape; flags i32
  // (slots), contiguous, on g's device. Nothing is read back to the host: a
  // caller unscaling many gradients reads the flags once.
  virtual void unscale_and_check(const Tensor& g, const Tensor& out, double inv, const Tensor& flags, int64_t slot);
};

// The backend for a device type; throws DeviceError if none is registered
// (e.g. "cuda:0" in a build without CUDA, or no GPU present).
Backend& backend_for(DeviceType t);
inline Backend& backend_for(Device d) { return backend_for(d.type); }
void register_backend(DeviceType t, Backend* b);  // b lives forever
bool has_backend(DeviceType t);
// Devices of type t that can be used: 1 for the CPU (cpu:N are its virtual
// devices), the GPUs the CUDA plugin sees for CUDA (0 without the plugin or
// a GPU). Never throws; asks the lazy backend (it may load the plugin).
int device_count(DeviceType t);

// A backend that loads on first use (the CUDA plugin: NOTE [ The CUDA plugin ]
// in cuda/plugin_loader.cpp, which registers this hook). The first request for
// device type t calls load(), which registers the backend when it can; when it
// could not, why_absent() says why, for backend_for's error. core/ knows no
// more of CUDA than this.
struct LazyBackend {
  void (*load)() = nullptr;
  std::string (*why_absent)() = nullptr;  // empty: loaded, but no device present
  int (*device_count)() = nullptr;         // devices present (never throws)
};
void register_lazy_backend(DeviceType t, LazyBackend hook);

}  // namespace snug
