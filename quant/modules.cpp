// SPDX-License-Identifier: MIT
#include <snug/quant/modules.h>

#include <cstring>
#include <type_traits>

#include <snug/autograd/grad_mode.h>
#include <snug/core/raw_ops.h>
#include <snug/nn/functional.h>

namespace snug::quant {

namespace F = nn::functional;

QParams weight_qparams(const Tensor& w) {
  std::vector<float> mins, maxs;
  min_max(w, 0, mins, maxs);
  return choose_qparams(mins, maxs, DType::i8, /*symmetric=*/true, 0);
}

// ---- the shared int8 state -----------------------------------------------------------------

Tensor QuantizedWeights::init(nn::Module& owner, const Tensor& w_float, const Tensor& b_float,
                              std::optional<QParams> input) {
  NoGradGuard ng;
  SNUG_CHECK(w_float.defined(), ValueError, owner.name(), ": the float layer has no weight to quantize");
  const QParams wq = weight_qparams(w_float.detach());
  owner.register_buffer("weight_int8", weight_int8 = quantize(w_float.detach(), wq));
  owner.register_buffer("weight_scale", weight_scale = from_vector(wq.scale, {int64_t(wq.scale.size())}));
  Tensor bias;
  if (b_float.defined()) owner.register_buffer("bias", bias = raw::clone(raw::to_dtype(b_float.detach(), DType::f32)));
  if (input) {
    SNUG_CHECK(input->dtype == DType::u8 && !input->per_channel(), ValueError, owner.name(),
               ": input parameters must be u8 per-tensor, got ", input->str());
    owner.register_buffer("input_scale", input_scale = from_vector(input->scale, {1}));
    owner.register_buffer("input_zero_point", input_zero_point = from_vector(input->zero_point, {1}, DType::i32));
  }
  return bias;
}

void QuantizedWeights::repack() {
  const int64_t N = weight_int8.size(0), K = weight_int8.numel() / std::max<int64_t>(N, 1);
  Tensor w = raw::view(raw::contiguous(weight_int8), {N, K});
  const int8_t* p = w.data<int8_t>();
  packed_ = raw::pack_int8_weight(w);
  colsum_.assign(size_t(N), 0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) colsum_[size_t(n)] += p[n * K + k];
}

QParams QuantizedWeights::input_qparams(const Tensor& x) const {
  if (!is_dynamic()) {
    QParams q;
    q.dtype = DType::u8;
    q.scale = {float(input_scale.item())};
    q.zero_point = {int32_t(input_zero_point.item())};
    return q;
  }
  std::vector<float> mins, maxs;
  min_max(x, -1, mins, maxs);
  return choose_qparams(mins, maxs, DType::u8, false);
}

// xq (M, K) u8 quantized with qx -> (M, N) f32
Tensor QuantizedWeights::matmul_quantized(const Tensor& xq, const QParams& qx, const Tensor& bias,
                                          const nn::Module& who) {
  if (!packed_.defined()) repack();
  const int64_t M = xq.size(0), K = xq.size(1), N = packed_.rows();
  SNUG_CHECK(K == packed_.cols(), ShapeError, who.repr(), ": input rows of length ", K, " but the weights expect ",
             packed_.cols());
  const Tensor acc = raw::gemm_u8s8s32(xq, packed_);  // (M, N)
  Tensor y = empty({M, N}, DType::f32);
  const int32_t* a = acc.data<int32_t>();
  float* out = y.data<float>();
  Tensor ws = raw::contiguous(weight_scale);
  const float* sw = ws.data<float>();
  Tensor bc = bias.defined() ? raw::contiguous(bias) : Tensor();
  const float* b = bc.defined() ? bc.data<float>() : nullptr;
  const float sx = qx.scale[0];
  const int32_t zx = qx.zero_point[0];
#pragma omp parallel for schedule(static) if (M * N > (1 << 16))
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n)
      out[m * N + n] = sx * sw[n] * float(a[m * N + n] - zx * colsum_[size_t(n)]) + (b ? b[n] : 0.0f);
  return y;
}

// ---- Linear ----------------------------------------------------------------------------------

QuantizedLinear::QuantizedLinear(const nn::Linear& f, std::optional<QParams> input) : nn::Linear("QuantizedLinear", f) {
  bias = init(*this, f.weight, f.bias, std::move(input));
}

Tensor QuantizedLinear::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() >= 1 && x.size(-1) == in_features, ShapeError, repr(), ": input of shape ", shape_str(x.shape()),
             " (expected last dim ", in_features, ")");
  Shape out_shape = x.shape();
  out_shape.back() = out_features;
  Tensor x2 = raw::view(raw::contiguous(raw::to_dtype(x, DType::f32)), {-1, in_features});
  const QParams qx = input_qparams(x2);
  return raw::view(matmul_quantized(quantize(x2, qx), qx, bias, *this), out_shape);
}

std::string QuantizedLinear::repr() const {
  return str("QuantizedLinear(in=", in_features, ", out=", out_features, ", ", is_dynamic() ? "dynamic" : "static",
             ")");
}

// ---- Conv2d ------------------------------------------------------------------------------------

namespace {
void check_plain_conv(const nn::Conv2d& f, const char* who) {
  SNUG_CHECK(f.groups == 1, ValueError, who, ": grouped convolutions (groups=", f.groups,
             ") are not supported; leave them in float");
}
}  // namespace

QuantizedConv2d::QuantizedConv2d(const nn::Conv2d& f, std::optional<QParams> input) : nn::Conv2d("QuantizedConv2d", f) {
  check_plain_conv(f, "QuantizedConv2d");
  bias = init(*this, f.weight, f.bias, std::move(input));
}

// x (N, C, H, W) -> (N, O, Ho, Wo): quantize, im2col in u8 (padding = the
// zero point, i.e. an exact 0), one int8 GEMM, back to NCHW.
Tensor QuantizedConv2d::forward(const Tensor& x) {
  SNUG_CHECK(x.dim() == 4 && x.size(1) == in_channels, ShapeError, repr(), ": input of shape ", shape_str(x.shape()),
             " (expected (N, ", in_channels, ", H, W))");
  const int64_t N = x.size(0), C = in_channels, H = x.size(2), W = x.size(3);
  // Plain variables, not a structured binding: clang 14 cannot use those inside an OpenMP region.
  const int64_t kh = std::get<0>(kernel_size), kw = std::get<1>(kernel_size);
  const int64_t Ho = (H + 2 * padding[0] - dilation[0] * (kh - 1) - 1) / stride[0] + 1;
  const int64_t Wo = (W + 2 * padding[1] - dilation[1] * (kw - 1) - 1) / stride[1] + 1;
  SNUG_CHECK(Ho > 0 && Wo > 0, ShapeError, repr(), ": input ", shape_str(x.shape()), " is smaller than the kernel");
  Tensor xf = raw::contiguous(raw::to_dtype(x, DType::f32));
  const QParams qx = input_qparams(xf);
  Tensor xq = quantize(xf, qx);
  const uint8_t* src = xq.data<uint8_t>();
  const int64_t K = C * kh * kw, rows = N * Ho * Wo;
  Tensor cols = empty({rows, K}, DType::u8);
  uint8_t* dst = cols.data<uint8_t>();
  const uint8_t zp = uint8_t(qx.zero_point[0]);
#pragma omp parallel for schedule(static) if (rows * K > (1 << 16))
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t n = r / (Ho * Wo), oh = (r / Wo) % Ho, ow = r % Wo;
    uint8_t* row = dst + r * K;
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i) {
        const int64_t ih = oh * stride[0] - padding[0] + i * dilation[0];
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t iw = ow * stride[1] - padding[1] + j * dilation[1];
          const bool in = ih >= 0 && ih < H && iw >= 0 && iw < W;
          *row++ = in ? src[((n * C + c) * H + ih) * W + iw] : zp;
        }
      }
  }
  Tensor y = matmul_quantized(cols, qx, bias, *this);  // (N*Ho*Wo, O)
  return raw::contiguous(raw::permute(raw::view(y, {N, Ho, Wo, out_channels}), {0, 3, 1, 2}));
}

std::string QuantizedConv2d::repr() const {
  return str("QuantizedConv2d(", in_channels, ", ", out_channels, ", kernel_size=(", kernel_size[0], ", ",
             kernel_size[1], "), ", is_dynamic() ? "dynamic" : "static", ")");
}

// ---- calibration ------------------------------------------------------------------------------

namespace {
// The float layer's own weight and bias tensors, registered under the same
// names, so state_dict keys and the optimizer's tensors stay what they were.
template <class Layer>
void share_float_tensors(Layer& self, const std::type_identity_t<Layer>& f) {
  self.weight = self.register_parameter("weight", f.weight, f.weight.requires_grad());
  if (f.bias.defined()) self.bias = self.register_parameter("bias", f.bias, f.bias.requires_grad());
}
std::unique_ptr<Observer> make_input_observer(const std::string& kind) {
  return make_observer(kind, {DType::u8, false, -1});
}
}  // namespace

ObservedLinear::ObservedLinear(const nn::Linear& f, const std::string& kind)
    : nn::Linear("ObservedLinear", f), observer(make_input_observer(kind)) {
  share_float_tensors<nn::Linear>(*this, f);
}
Tensor ObservedLinear::forward(const Tensor& x) {
  observer->observe(x.detach());
  return F::linear(x, weight, bias);
}
std::string ObservedLinear::repr() const { return str("ObservedLinear(in=", in_features, ", out=", out_features, ")"); }

ObservedConv2d::ObservedConv2d(const nn::Conv2d& f, const std::string& kind)
    : nn::Conv2d("ObservedConv2d", f), observer(make_input_observer(kind)) {
  check_plain_conv(f, "ObservedConv2d");
  share_float_tensors<nn::Conv2d>(*this, f);
}
Tensor ObservedConv2d::forward(const Tensor& x) {
  observer->observe(x.detach());
  return F::conv2d(x, weight, bias, stride, padding, dilation, groups);
}
std::string ObservedConv2d::repr() const { return "Observed" + nn::Conv2d::repr(); }

// ---- QAT --------------------------------------------------------------------------------------------

FakeQuantize::FakeQuantize(std::unique_ptr<Observer> o) : nn::Module("FakeQuantize"), observer(std::move(o)) {}
Tensor FakeQuantize::forward(const Tensor& x) {
  if (is_training() || !observer->observed()) observer->observe(x.detach());
  return fake_quantize(x, observer->qparams());
}

QATLinear::QATLinear(const nn::Linear& f, const std::string& kind) : nn::Linear("QATLinear", f) {
  share_float_tensors<nn::Linear>(*this, f);
  register_module("input_fq", input_fq, std::make_shared<FakeQuantize>(make_input_observer(kind)));
}
Tensor QATLinear::forward(const Tensor& x) {
  return F::linear(input_fq->forward(x), fake_quantize(weight, weight_qparams(weight.detach())), bias);
}
std::string QATLinear::repr() const { return str("QATLinear(in=", in_features, ", out=", out_features, ")"); }

QATConv2d::QATConv2d(const nn::Conv2d& f, const std::string& kind) : nn::Conv2d("QATConv2d", f) {
  check_plain_conv(f, "QATConv2d");
  share_float_tensors<nn::Conv2d>(*this, f);
  register_module("input_fq", input_fq, std::make_shared<FakeQuantize>(make_input_observer(kind)));
}
Tensor QATConv2d::forward(const Tensor& x) {
  return F::conv2d(input_fq->forward(x), fake_quantize(weight, weight_qparams(weight.detach())), bias, stride, padding,
                   dilation, groups);
}
std::string QATConv2d::repr() const { return "QAT" + nn::Conv2d::repr(); }

}  // namespace snug::quant
