// SPDX-License-Identifier: MIT
// Every op of the CUDA backend against the CPU backend on the same inputs.
// Tolerances (relative to max(1, |cpu|)): exact for copies, fills, index ops,
// comparisons, where, max/min, arg reductions and uniform draws (the same
// Philox words, so dropout masks match bit for bit); 1e-5 for f32 math
// (device libm and exp_approx differ from the host by a few ulps; sums are
// combined in another order); 1e-12 for f64; 1e-2 for f16/bf16 (one rounding
// of a 16-bit result); 1e-4 for normal draws (device logf/sinf/cosf) and for
// f32 matmul without TF32. Fused optimizer updates: 1e-5 for the f32
// parameters, masters and moments after three steps (nvcc contracts a*b+c
// into one FMA where the host compiler may not), 1e-2 for f16/bf16
// parameters (their masters rounded once). The loss scaler's unscale: exact
// (a power-of-two scale), with the same inf/NaN verdict per parameter.
// Without a GPU every case skips itself and says so.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <string>

#include <snug/autograd/autocast.h>
#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/core/profiler.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/cuda_api.h>
#include <snug/cuda/fused_api.h>
#include <snug/memory/allocator.h>
#include <snug/memory/stream.h>
#include <snug/nn/amp/grad_scaler.h>
#include <snug/nn/functional.h>
#include <snug/nn/fused.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>

using namespace snug;

namespace {

bool skip_without_gpu() {
  if (cuda::device_count() > 0) return false;
  MESSAGE(str(
      "skipped: no CUDA GPU (",
      cuda::compiled() ? "CUDA is compiled in, but the driver sees no device" : "this build of snug has no CUDA", ")"));
  return true;
}

const Device kGpu("cuda:0");

void check_close(const Tensor& gpu, const Tensor& cpu, double tol, const std::string& what) {
  CAPTURE(what);
  REQUIRE(gpu.device() == kGpu);
  const Tensor back = gpu.to(kCPU);
  REQUIRE(back.shape() == cpu.shape());
  CHECK(back.dtype() == cpu.dtype());
  const auto g = back.to_vector<double>(), c = cpu.to_vector<double>();
  int64_t bad = 0;
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(c[i]) && std::isnan(g[i])) continue;
    if (std::isinf(c[i]) && g[i] == c[i]) continue;
    const double err = std::fabs(g[i] - c[i]) / std::max(1.0, std::fabs(c[i]));
    worst = std::max(worst, err);
    bad += !(err <= tol);
  }
  CAPTURE(worst);
  CHECK(bad == 0);
}

double tol_for(DType d) { return d == kFloat64 ? 1e-12 : (d == kFloat32 ? 1e-5 : 1e-2); }

// op on CPU inputs and on their copies on the GPU.
void parity(const std::string& what, const std::vector<Tensor>& in,
            const std::function<Tensor(const std::vector<Tensor>&)>& op, double tol) {
  std::vector<Tensor> gin;
  for (const auto& t : in) gin.push_back(t.to(kGpu));
  check_close(op(gin), op(in), tol, what);
}

}  // namespace

TEST_CASE("cuda parity: copies in every direction") {
  if (skip_without_gpu()) return;
  manual_seed(1);
  const Tensor x = randn({37, 19});
  const Tensor g = x.to(kGpu);  // host -> device
  check_close(g, x, 0, "H2D then D2H");
  check_close(g.clone(), x, 0, "D2D clone");  // device -> device
  check_close(g.t().contiguous(), x.t().contiguous(), 0, "strided copy");
  check_close(g.to(kFloat16), x.to(kFloat16), 0, "f32 -> f16 conversion");
  check_close(g.to(kFloat64).to(kBFloat16), x.to(kFloat64).to(kBFloat16), 0, "f64 -> bf16 (round to odd)");
  check_close(g.to(kInt32), x.to(kInt32), 0, "f32 -> i32");
  check_close(g.to(kBool), x.to(kBool), 0, "f32 -> bool");
  if (cuda::device_count() > 1) {
    const Tensor g1 = g.to(Device("cuda:1"));  // across GPUs
    check_close(g1.to(kGpu), x, 0, "cuda:0 -> cuda:1 -> cuda:0");
  } else {
    MESSAGE("skipped: peer copy needs two GPUs");
  }
  const Tensor empty0 = zeros({0, 3}).to(kGpu);
  CHECK(empty0.to(kCPU).numel() == 0);
}

TEST_CASE("cuda parity: fill, unary, binary, compare, where over dtypes, strides and broadcasts") {
  if (skip_without_gpu()) return;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(2);
    const Tensor a = randn({6, 33}).to(dt), b = randn({33}).to(dt), pos = rand({6, 33}).to(dt);
    const double tol = tol_for(dt);
    check_close(full({4, 5}, 0.1, TensorOptions(dt, kGpu)), full({4, 5}, 0.1, TensorOptions(dt)), 0, "full");
    check_close(full({3}, 1e300, TensorOptions(dt, kGpu)), full({3}, 1e300, TensorOptions(dt)), 0, "full overflow");
    for (int i = 0; i < kNumUnaryOps; ++i) {
      const auto op = UnaryOp(i);
      const bool needs_pos = op == UnaryOp::log || op == UnaryOp::sqrt || op == UnaryOp::rsqrt;
      parity(
          unary_op_name(op), {needs_pos ? pos : a},
          [&](const std::vector<Tensor>& v) { return raw::unary(op, v[0], 0.5, 1.5); }, tol);
    }
    for (int i = 0; i < kNumBinaryOps; ++i) {
      const auto op = BinaryOp(i);
      parity(
          binary_op_name(op), {op == BinaryOp::pow ? pos : a, b},
          [&](const std::vector<Tensor>& v) { return raw::binary(op, v[0], v[1]); }, tol);
      parity(
          std::string(binary_op_name(op)) + " transposed", {a.t(), a.t()},
          [&](const std::vector<Tensor>& v) { return raw::binary(op, v[0], v[1]); }, tol);
    }
    for (int i = 0; i < kNumCompareOps; ++i)
      parity(
          compare_op_name(CompareOp(i)), {a, b},
          [&](const std::vector<Tensor>& v) { return raw::compare(CompareOp(i), v[0], v[1]); }, 0);
    parity(
        "where", {a, b}, [&](const std::vector<Tensor>& v) { return where(gt(v[0], v[1]), v[0], v[1]); }, 0);
  }
  for (DType dt : {kInt64, kInt32, kInt8, kUInt8}) {
    CAPTURE(dtype_name(dt));
    const Tensor a = (rand({5, 7}) * 20).to(dt), b = (rand({7}) * 20 + 1).to(dt);
    for (auto op : {BinaryOp::add, BinaryOp::sub, BinaryOp::mul, BinaryOp::maximum, BinaryOp::minimum})
      parity(
          binary_op_name(op), {a, b}, [&](const std::vector<Tensor>& v) { return raw::binary(op, v[0], v[1]); }, 0);
    for (auto op : {UnaryOp::neg, UnaryOp::abs, UnaryOp::relu, UnaryOp::square})
      parity(
          unary_op_name(op), {a}, [&](const std::vector<Tensor>& v) { return raw::unary(op, v[0]); }, 0);
  }
}

TEST_CASE("cuda parity: reductions and arg reductions") {
  if (skip_without_gpu()) return;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(3);
    const Tensor x = randn({7, 300, 5}).to(dt);
    const double tol = dt == kFloat32 ? 1e-5 : tol_for(dt);
    for (std::vector<int64_t> dims : {std::vector<int64_t>{}, {0}, {1}, {2}, {0, 2}}) {
      parity(
          "sum", {x}, [&](const std::vector<Tensor>& v) { return sum(v[0], dims); }, tol);
      parity(
          "mean", {x}, [&](const std::vector<Tensor>& v) { return mean(v[0], dims); }, tol);
      parity(
          "amax", {x}, [&](const std::vector<Tensor>& v) { return amax(v[0], dims); }, 0);
      parity(
          "amin", {x}, [&](const std::vector<Tensor>& v) { return amin(v[0], dims); }, 0);
    }
    // Down the columns of (rows, C), as a bias gradient: 32 outputs a block.
    const Tensor xc = randn({500, 70}).to(dt);
    parity(
        "sum over rows", {xc}, [&](const std::vector<Tensor>& v) { return sum(v[0], {0}); }, tol);
    parity(
        "amax over rows", {xc}, [&](const std::vector<Tensor>& v) { return amax(v[0], {0}); }, 0);
    for (int64_t d : {0, 1, 2}) {
      parity(
          "argmax", {x}, [&](const std::vector<Tensor>& v) { return argmax(v[0], d); }, 0);
      parity(
          "argmin", {x.transpose(0, 2)}, [&](const std::vector<Tensor>& v) { return argmin(v[0], d); }, 0);
    }
  }
  const Tensor xi = (rand({4, 9}) * 10).to(kInt32);
  parity(
      "sum i32 -> i64", {xi}, [&](const std::vector<Tensor>& v) { return sum(v[0], {1}); }, 0);
}

TEST_CASE("cuda parity: softmax, log_softmax, causal softmax, layer norm, forward and backward") {
  if (skip_without_gpu()) return;
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(4);
    const double tol = tol_for(dt);
    const Tensor x = randn({4, 6, 70}).to(dt), g = randn({4, 6, 70}).to(dt);
    for (int64_t d : {0, 1, 2}) {
      for (bool log : {false, true}) {
        parity(
            log ? "log_softmax" : "softmax", {x},
            [&](const std::vector<Tensor>& v) { return raw::softmax(v[0], d, log); }, tol);
        parity(
            log ? "log_softmax backward" : "softmax backward", {g, x},
            [&](const std::vector<Tensor>& v) {
              return raw::softmax_backward(v[0], raw::softmax(v[1], d, log), d, log);
            },
            tol);
      }
    }
    const Tensor s = randn({2, 3, 9, 12}).to(dt);
    parity(
        "causal_softmax", {s}, [&](const std::vector<Tensor>& v) { return nn::functional::causal_softmax(v[0], 0.3); },
        tol);
    const Tensor w = randn({70}).to(dt), bias = randn({70}).to(dt);
    for (bool with_affine : {true, false}) {
      parity(
          "layer_norm", {x, w, bias},
          [&](const std::vector<Tensor>& v) {
            return with_affine ? nn::functional::layer_norm(v[0], v[1], v[2])
                               : nn::functional::layer_norm(v[0], Tensor(), Tensor());
          },
          dt == kFloat32 ? 1e-4 : tol);
    }
    // Backward through autograd: gradients of sum(layer_norm(x) * g).
    if (dt == kFloat32 || dt == kFloat64) {
      auto grads = [&](const std::vector<Tensor>& v) {
        Tensor xs = v[0].detach(), ws = v[1].detach(), bs = v[2].detach();
        xs.requires_grad_();
        ws.requires_grad_();
        bs.requires_grad_();
        sum(mul(nn::functional::layer_norm(xs, ws, bs), v[3])).backward();
        return cat({xs.grad().flatten(), ws.grad(), bs.grad()});
      };
      parity("layer_norm backward", {x, w, bias, g}, grads, dt == kFloat32 ? 1e-4 : 1e-10);
      // 305 rows: the weight and bias sums over several chunks of rows.
      const Tensor xl = randn({5, 61, 70}).to(dt), gl = randn({5, 61, 70}).to(dt);
      parity("layer_norm backward, 305 rows", {xl, w, bias, gl}, grads, dt == kFloat32 ? 1e-4 : 1e-10);
    }
  }
}

TEST_CASE("cuda parity: fused causal self-attention, forward and backward (head sizes 8 to 256, T across warps)") {
  if (skip_without_gpu()) return;
  manual_seed(5);
  struct Case {
    int64_t B, T, C, H;
  };
  // T < cuda::kAttentionGemmMinT: the warp kernels; from it on, the cuBLAS
  // path, here also in chunks of one and of three heads (of 8).
  const std::size_t chunk0 = cuda::set_attention_chunk_bytes(std::size_t{128} << 20);
  for (Case c : {Case{2, 45, 24, 3}, Case{1, 1, 4, 1}, Case{2, 130, 128, 4}, Case{1, 33, 512, 2}, Case{1, 70, 512, 2},
                 Case{2, 64, 32, 4}, Case{2, 100, 64, 4}}) {
    for (std::size_t chunk : {std::size_t{128} << 20, std::size_t(c.T * c.T * 4), std::size_t(3 * c.T * c.T * 4)}) {
      if (c.T < cuda::kAttentionGemmMinT && chunk != (std::size_t{128} << 20)) continue;
      cuda::set_attention_chunk_bytes(chunk);
      CAPTURE(c.T);
      CAPTURE(c.C / c.H);
      CAPTURE(chunk);
      const Tensor qkv = randn({c.B, c.T, 3 * c.C}), w = randn({c.B, c.T, c.C});
      // y and d(sum(y * w))/dqkv, through the fused op on both devices.
      auto run = [&](const std::vector<Tensor>& v) {
        Tensor x = v[0].detach();
        x.requires_grad_();
        Tensor y = nn::functional::causal_self_attention(x, c.H);
        sum(mul(y, v[1])).backward();
        return cat({y.detach().flatten(), x.grad().flatten()});
      };
      parity("causal_self_attention", {qkv, w}, run, 1e-4);
    }
  }
  cuda::set_attention_chunk_bytes(chunk0);
  // bf16 qkv (an autocast region's): the GPU converts it around its f32 op
  // (TF32 products); the CPU runs the composed bf16 ops. Both return bf16.
  const Tensor qkv = randn({2, 70, 3 * 64}), w = randn({2, 70, 64});
  auto run16 = [&](const std::vector<Tensor>& v) {
    Tensor x = v[0].to(DType::bf16).detach();
    x.requires_grad_();
    Tensor y = nn::functional::causal_self_attention(x, 2);
    CHECK(y.dtype() == DType::bf16);
    sum(mul(y.to(DType::f32), v[1])).backward();
    CHECK(x.grad().dtype() == DType::bf16);
    return cat({y.detach().to(DType::f32).flatten(), x.grad().to(DType::f32).flatten()});
  };
  parity("causal_self_attention bf16", {qkv, w}, run16, 5e-2);
}

// NOTE [ Attention through cuDNN ] (cuda/attention_cudnn.cpp): bf16 and f16
// attention, causal or not, goes through cuDNN's fused flash attention where
// the GPU and the build allow it; the profiler names the path that ran.
// Tolerances: bf16 5e-2, f16 1e-2 (the same as the kernels' 16-bit cases;
// both sides round y and the gradients to 16 bits once).
TEST_CASE("cuda parity: bf16 and f16 attention through cuDNN, forward and backward, causal or not") {
  if (skip_without_gpu()) return;
  manual_seed(11);
  struct Case {
    int64_t B, T, C, H;
  };
  int cudnn_runs = 0, kernel_runs = 0;
  for (DType dt : {DType::bf16, DType::f16})
    for (bool causal : {true, false})
      for (Case c : {Case{2, 128, 256, 4}, Case{1, 200, 384, 3}, Case{2, 64, 128, 4}}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(causal);
        CAPTURE(c.C / c.H);
        const Tensor qkv = randn({c.B, c.T, 3 * c.C}), w = randn({c.B, c.T, c.C});
        auto run = [&](const std::vector<Tensor>& v) {
          Tensor x = v[0].to(dt).detach();
          x.requires_grad_();
          Tensor y = nn::functional::self_attention(x, c.H, causal);
          CHECK(y.dtype() == dt);
          sum(mul(y.to(DType::f32), v[1])).backward();
          CHECK(x.grad().dtype() == dt);
          return cat({y.detach().to(DType::f32).flatten(), x.grad().to(DType::f32).flatten()});
        };
        parity(str("self_attention ", dtype_name(dt), causal ? " causal" : ""), {qkv, w}, run,
               dt == DType::bf16 ? 5e-2 : 1e-2);
        // Which path the GPU took, from the profiler's ranges.
        profiler::Profile prof;
        run({qkv.to(kGpu), w.to(kGpu)});
        prof.stop();
        bool fwd_cudnn = false, bwd_cudnn = false, fwd_kernels = false;
        for (const profiler::Event& e : prof.events()) {
          fwd_cudnn = fwd_cudnn || e.name == "attention[cudnn]";
          bwd_cudnn = bwd_cudnn || e.name == "attention_backward[cudnn]";
          fwd_kernels = fwd_kernels || e.name == "attention[kernels]";
        }
        CHECK(fwd_cudnn != fwd_kernels);  // exactly one path ran
        CHECK(fwd_cudnn == bwd_cudnn);    // (the same shapes: both or neither)
        (fwd_cudnn ? cudnn_runs : kernel_runs) += 1;
      }
  MESSAGE("attention through cuDNN in ", cudnn_runs, " cases, the kernels in ", kernel_runs,
          " (the kernels: a build without cuDNN's frontend, or a GPU before sm 80)");
}

TEST_CASE("cuda parity: bf16 and f16 attention with key padding, through cuDNN's sequence lengths or the kernels") {
  // A mask whose rows are valid keys then padding (pad_collate's) goes to cuDNN as sequence
  // lengths; padding inside a row takes the kernels. Both against the CPU, bf16 5e-2, f16 1e-2.
  if (skip_without_gpu()) return;
  manual_seed(12);
  const int64_t B = 3, T = 96, C = 256, H = 4;
  for (DType dt : {DType::bf16, DType::f16})
    for (bool causal : {false, true})
      for (bool suffix : {true, false}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(causal);
        CAPTURE(suffix);
        Tensor pad = zeros({B, T}, TensorOptions(kBool));
        for (int64_t b = 0; b < B; ++b) pad.select(0, b).narrow(0, T - 7 * (b + 1), 7 * (b + 1)).fill_(1);
        if (!suffix) pad.select(0, 1).narrow(0, 3, 2).fill_(1);  // padding inside row 1
        const Tensor qkv = randn({B, T, 3 * C}), w = randn({B, T, C});
        auto run = [&](const std::vector<Tensor>& v) {
          Tensor x = v[0].to(dt).detach();
          x.requires_grad_();
          Tensor y = nn::functional::self_attention(x, H, causal, Tensor(), v[2]);
          sum(mul(y.to(DType::f32), v[1])).backward();
          return cat({y.detach().to(DType::f32).flatten(), x.grad().to(DType::f32).flatten()});
        };
        parity("self_attention with key padding", {qkv, w, pad}, run, dt == DType::bf16 ? 5e-2 : 1e-2);
        profiler::Profile prof;
        run({qkv.to(kGpu), w.to(kGpu), pad.to(kGpu)});
        prof.stop();
        bool cudnn = false;
        for (const profiler::Event& e : prof.events()) cudnn = cudnn || e.name == "attention[cudnn]";
        MESSAGE(std::string(dtype_name(dt)), causal ? " causal" : "", suffix ? " suffix padding: " : " inner padding: ",
                cudnn ? "cuDNN" : "the kernels");
        if (!suffix) CHECK_FALSE(cudnn);
      }
}

TEST_CASE("cuda parity: masked and non-causal self-attention (key padding, bool and additive masks)") {
  if (skip_without_gpu()) return;
  manual_seed(21);
  const int64_t B = 3, C = 64, H = 4;
  // T = 45: the warp kernels (causal or not, key padding); T = 70: the cuBLAS
  // path, whole and in chunks of one head. A bool or additive mask takes the
  // composed default. Batch b's last 9 b keys are padding, and batch 2's
  // first 7 too (causal rows 0..6 there see no key: zeros, no NaN, among rows
  // that see some); with `all`, batch element 1 is padding throughout.
  const std::size_t chunk0 = cuda::set_attention_chunk_bytes(std::size_t{128} << 20);
  for (int64_t T : {int64_t{45}, int64_t{70}}) {
    for (bool all : {false, true}) {
      Tensor pad = zeros({B, T}, DType::b8);
      for (int64_t b = 0; b < B; ++b)
        for (int64_t t = 0; t < T; ++t)
          pad.data<bool>()[b * T + t] = t >= T - 9 * b || (b == 2 && t < 7) || (all && b == 1);
      const Tensor band = gt(abs(arange(T).view({T, 1}) - arange(T).view({1, T})), full({1}, 20.0, kInt64));  // (T, T)
      const Tensor additive = randn({B, 1, T, T});
      const Tensor qkv = randn({B, T, 3 * C}), w = randn({B, T, C});
      for (std::size_t chunk : {std::size_t{128} << 20, std::size_t(T * T * 4)}) {
        if (T < cuda::kAttentionGemmMinT && chunk != (std::size_t{128} << 20)) continue;
        cuda::set_attention_chunk_bytes(chunk);
        for (int k = 0; k < 5; ++k) {  // 0 padding, 1 causal + padding, 2 bool mask, 3 additive + padding, 4 neither
          if (all && (k == 2 || k == 4)) continue;  // no padding: the same as without `all`
          CAPTURE(T);
          CAPTURE(all);
          CAPTURE(chunk);
          CAPTURE(k);
          auto run = [&](const std::vector<Tensor>& v) {
            Tensor x = v[0].detach();
            x.requires_grad_();
            const Tensor p = (k == 2 || k == 4) ? Tensor() : v[2], m = k == 2 ? v[3] : (k == 3 ? v[4] : Tensor());
            Tensor y = nn::functional::self_attention(x, H, /*causal=*/k == 1, m, p);
            sum(mul(y, v[1])).backward();
            return cat({y.detach().flatten(), x.grad().flatten()});
          };
          parity("self_attention with masks", {qkv, w, pad, band, additive}, run, 1e-4);
        }
      }
    }
  }
  cuda::set_attention_chunk_bytes(chunk0);
}

TEST_CASE("cuda parity: batch norm through cuDNN (training, evaluation, f16 input, no affine), forward and backward") {
  if (skip_without_gpu()) return;
  manual_seed(9);
  for (const Shape& xs : {Shape{6, 5, 7, 3}, Shape{8, 4}, Shape{4, 3, 10}}) {
    CAPTURE(shape_str(xs));
    const int64_t C = xs[1];
    const Tensor x = randn(xs) * 2.0 + 0.5, w = randn({C}), b = randn({C}), g = randn(xs);
    const Tensor rm0 = randn({C}) * 0.1, rv0 = rand({C}) + 0.5;
    // Training: y, the three gradients of sum(y * g), and the running statistics after the update.
    auto train = [&](const std::vector<Tensor>& v, bool affine) {
      Tensor xv = v[0].detach(), wv = v[1].detach(), bv = v[2].detach(), rm = v[4].clone(), rv = v[5].clone();
      xv.requires_grad_();
      wv.requires_grad_();
      bv.requires_grad_();
      Tensor y = affine ? nn::functional::batch_norm(xv, rm, rv, wv, bv, true, 0.1, 1e-5)
                        : nn::functional::batch_norm(xv, rm, rv, Tensor(), Tensor(), true, 0.1, 1e-5);
      sum(mul(y, v[3])).backward();
      std::vector<Tensor> parts{y.detach().flatten(), xv.grad().flatten(), rm, rv};
      if (affine) {
        parts.push_back(wv.grad());
        parts.push_back(bv.grad());
      }
      return cat(parts);
    };
    parity(
        "batch_norm training", {x, w, b, g, rm0, rv0}, [&](const std::vector<Tensor>& v) { return train(v, true); },
        1e-4);
    parity(
        "batch_norm training, no affine", {x, w, b, g, rm0, rv0},
        [&](const std::vector<Tensor>& v) { return train(v, false); }, 1e-4);
    // Evaluation without gradients (cuDNN's inference call).
    parity(
        "batch_norm eval", {x, w, b, rm0, rv0},
        [&](const std::vector<Tensor>& v) {
          NoGradGuard ng;
          return nn::functional::batch_norm(v[0], v[3], v[4], v[1], v[2], false);
        },
        1e-5);
    // f16 data with f32 weights and statistics.
    parity(
        "batch_norm training f16", {x.to(kFloat16), w, b, rm0, rv0},
        [&](const std::vector<Tensor>& v) {
          Tensor rm = v[3].clone(), rv = v[4].clone();
          Tensor y = nn::functional::batch_norm(v[0], rm, rv, v[1], v[2], true, 0.1, 1e-5);
          return cat({y.to(kFloat32).flatten(), rm, rv});
        },
        1e-2);
  }
}

TEST_CASE("cuda parity: index_select, index_add, gather, scatter_add, embedding") {
  if (skip_without_gpu()) return;
  manual_seed(5);
  const Tensor x = randn({10, 8}), idx = from_vector<int64_t>({3, 0, 9, 3, 7}, {5}, TensorOptions(kInt64));
  parity(
      "index_select 0", {x, idx}, [&](const std::vector<Tensor>& v) { return index_select(v[0], 0, v[1]); }, 0);
  parity(
      "index_select 1", {x, from_vector<int64_t>({7, 0, 2, 2}, {4}, TensorOptions(kInt64))},
      [&](const std::vector<Tensor>& v) { return index_select(v[0], 1, v[1]); }, 0);
  const Tensor src = randn({5, 8});
  parity(
      "index_add", {x, idx, src}, [&](const std::vector<Tensor>& v) { return raw::index_add(v[0], 0, v[1], v[2]); },
      1e-6);
  const Tensor gi = from_vector<int64_t>({1, 0, 7, 7, 2, 3, 5, 6, 0, 1}, {10, 1}, TensorOptions(kInt64));
  parity(
      "gather", {x, gi}, [&](const std::vector<Tensor>& v) { return gather(v[0], 1, v[1]); }, 0);
  parity(
      "scatter_add", {x, gi, randn({10, 1})},
      [&](const std::vector<Tensor>& v) { return scatter_add(v[0], 1, v[1], v[2]); }, 1e-6);
  const Tensor tokens = from_vector<int64_t>({1, 4, 4, 0, 9, 2}, {2, 3}, TensorOptions(kInt64));
  parity(
      "embedding", {tokens, x}, [&](const std::vector<Tensor>& v) { return nn::functional::embedding(v[0], v[1]); }, 0);
}

TEST_CASE("cuda parity: random draws and dropout masks use the CPU's Philox stream") {
  if (skip_without_gpu()) return;
  for (DType dt : {kFloat32, kFloat64, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    manual_seed(42);
    const Tensor cu = rand({1001}, TensorOptions(dt));
    const Tensor cn = randn({1001}, TensorOptions(dt));
    const Tensor cd = dropout(ones({3, 333}, TensorOptions(dt)), 0.3);
    manual_seed(42);
    const Tensor gu = rand({1001}, TensorOptions(dt, kGpu));
    const Tensor gn = randn({1001}, TensorOptions(dt, kGpu));
    const Tensor gd = dropout(ones({3, 333}, TensorOptions(dt, kGpu)), 0.3);
    check_close(gu, cu, 0, "uniform (bit-identical)");
    check_close(gn, cn, dt == kBFloat16 ? 1e-2 : 1e-4, "normal (device libm)");
    check_close(gd, cd, 0, "dropout mask (bit-identical)");
  }
  // The dropout kernel (cuda/dropout.cu) against the CPU's composition, forward and backward, on
  // random values in every floating dtype: bit for bit (the same draws, the same roundings).
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16}) {
    CAPTURE(dtype_name(dt));
    const Tensor x = (randn({5, 777}) * 2.0).to(dt), g = randn({5, 777}).to(dt);
    auto run = [&](const std::vector<Tensor>& v) {
      Generator gen(99);
      Tensor xr = v[0].detach().requires_grad_();
      Tensor y = dropout(xr, 0.2, true, &gen);
      y.backward(v[1]);
      return cat({y.detach().flatten(), xr.grad().flatten()});
    };
    parity("dropout kernel, forward and backward", {x, g}, run, 0);
  }
}

TEST_CASE("cuda parity: matmul through cuBLAS") {
  if (skip_without_gpu()) return;
  manual_seed(6);
  for (DType dt : {kFloat32, kFloat64, kFloat16, kBFloat16}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-12 : (dt == kFloat32 ? 1e-4 : 2e-2);
    const Tensor a = randn({3, 17, 40}).to(dt), b = randn({3, 40, 23}).to(dt), w = randn({23, 40}).to(dt);
    parity(
        "batched", {a, b}, [&](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }, tol);
    parity(
        "x @ w.t() (broadcast weight, transposed)", {a, w},
        [&](const std::vector<Tensor>& v) { return matmul(v[0], v[1].t()); }, tol);
    parity(
        "q @ k^T", {a, a}, [&](const std::vector<Tensor>& v) { return matmul(v[0], v[1].transpose(-2, -1)); }, tol);
    parity(
        "vector", {a, randn({40}).to(dt)}, [&](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }, tol);
  }
  cuda::set_allow_tf32(true);
  const Tensor a = randn({64, 64}), b = randn({64, 64});
  parity(
      "tf32", {a, b}, [&](const std::vector<Tensor>& v) { return matmul(v[0], v[1]); }, 2e-2);
  cuda::set_allow_tf32(false);
}

TEST_CASE("cuda parity: a Linear's GEMMs through cuBLASLt with bias, GELU and bias-gradient epilogues") {
  // The backend entries straight (NOTE [ Linear through cuBLASLt ] in cuda/linear_lt.cpp), every
  // activation with and without bias and pre-activation, against the CPU's. Widths 64 and 96 take
  // the aux epilogues, 20 the fallbacks (an aux leading dimension not a multiple of 8), f64 the
  // composed default. Tolerances: 1e-4 for f32 (cuBLASLt may sum in another order), 3e-2 for 16-bit
  // (one rounding of the result, and of the pre-activation the GELU reads).
  if (skip_without_gpu()) return;
  manual_seed(21);
  using Act = Backend::Activation;
  for (DType dt : {kFloat32, kFloat16, kBFloat16, kFloat64})
    for (int64_t width : {64, 96, 20}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(width);
      const double tol = dt == kFloat64 ? 1e-12 : (dt == kFloat32 ? 1e-4 : 3e-2);
      const int64_t N = 48, in = width, outf = width;
      const Tensor x = randn({N, in}).to(dt), w = (randn({outf, in}) * 0.2).to(dt), b = randn({outf}).to(dt);
      const Tensor g = randn({N, outf}).to(dt), z = randn({N, in}).to(dt);
      for (Act act : {Act::none, Act::relu, Act::gelu, Act::gelu_tanh})
        for (bool with_bias : {true, false})
          for (bool with_pre : {true, false}) {
            CAPTURE(static_cast<int>(act));
            CAPTURE(with_bias);
            CAPTURE(with_pre);
            auto fwd = [&](const std::vector<Tensor>& v) {
              const Tensor out = empty({N, outf}, v[0].options());
              const Tensor pre = with_pre ? empty({N, outf}, v[0].options()) : Tensor();
              backend_for(v[0].device()).linear_act(v[0], v[1], with_bias ? v[2] : Tensor(), act, out, pre);
              return with_pre ? cat({out.flatten(), pre.flatten()}) : out;
            };
            parity("linear_act", {x, w, b}, fwd, tol);
          }
      // Backward: every subset of the gradients, the bias's by BGRADB where cuBLASLt has it.
      for (int wanted = 1; wanted < 8; ++wanted) {
        CAPTURE(wanted);
        auto bwd = [&](const std::vector<Tensor>& v) {
          const Tensor gx = wanted & 1 ? empty({N, in}, v[0].options()) : Tensor();
          const Tensor gw = wanted & 2 ? empty({outf, in}, v[0].options()) : Tensor();
          const Tensor gb = wanted & 4 ? empty({outf}, v[0].options()) : Tensor();
          backend_for(v[0].device()).linear_backward(v[0], v[1], v[2], gx, gw, gb);
          std::vector<Tensor> parts;
          for (const Tensor& t : {gx, gw, gb})
            if (t.defined()) parts.push_back(t.flatten());
          return cat(parts);
        };
        parity("linear_backward", {g, x, w}, bwd, tol * 4);
      }
      // x transposed (a column-major operand), and the weight as a transposed view.
      parity(
          "linear_backward, strided operands", {g, x.t().contiguous().t(), w.t().contiguous().t()},
          [&](const std::vector<Tensor>& v) {
            const Tensor gx = empty({N, in}, v[0].options()), gw = empty({outf, in}, v[0].options());
            const Tensor gb = empty({outf}, v[0].options());
            backend_for(v[0].device()).linear_backward(v[0], v[1], v[2], gx, gw, gb);
            return cat({gx.flatten(), gw.flatten(), gb});
          },
          tol * 4);
      for (Act act : {Act::relu, Act::gelu, Act::gelu_tanh}) {
        CAPTURE(static_cast<int>(act));
        parity(
            "linear_backward_act", {g, w, z},
            [&](const std::vector<Tensor>& v) {
              const Tensor gz = empty({N, in}, v[0].options());
              backend_for(v[0].device()).linear_backward_act(v[0], v[1], act, v[2], gz);
              return gz;
            },
            tol * 4);
      }
    }
  // Through nn: a bf16 GELU(tanh) MLP's forward and all its gradients.
  const Tensor x = randn({64, 128}), w1 = randn({256, 128}) * 0.1, b1 = randn({256}) * 0.1;
  const Tensor w2 = randn({128, 256}) * 0.1, b2 = randn({128}) * 0.1;
  parity(
      "gelu_mlp bf16 under autocast", {x, w1, b1, w2, b2},
      [&](const std::vector<Tensor>& v) {
        std::vector<Tensor> p;
        for (const Tensor& t : v) p.push_back(t.detach().requires_grad_());
        Tensor y;
        {
          AutocastGuard ac(kBFloat16);
          y = nn::functional::gelu_mlp(p[0], p[1], p[2], p[3], p[4], GeluApprox::tanh);
        }
        sum(y.to(kFloat32)).backward();
        std::vector<Tensor> parts{y.detach().to(kFloat32).flatten()};
        for (const Tensor& t : p) parts.push_back(t.grad().flatten());
        return cat(parts);
      },
      5e-2);
}

TEST_CASE("cuda parity: the residual add and layer norm in one kernel each way") {
  // add_layer_norm (layer_norm.cu with the residual): h, y and every gradient against the CPU's
  // composed default; h used again downstream, as in a pre-norm block. Tolerances: tol_for(dtype),
  // 16-bit gradients 2e-2 (the fused store rounds the sum once where the ops round twice).
  if (skip_without_gpu()) return;
  manual_seed(41);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16})
    for (int64_t C : {24, 768, 1000}) {
      CAPTURE(dtype_name(dt));
      CAPTURE(C);
      const Tensor x = (randn({4, 33, C}) * 2.0).to(dt), r = randn({4, 33, C}).to(dt);
      const Tensor w = randn({C}), b = randn({C}), gh = randn({4, 33, C}).to(dt), gy = randn({4, 33, C}).to(dt);
      auto run = [&](const std::vector<Tensor>& v) {
        std::vector<Tensor> p;
        for (const Tensor& t : {v[0], v[1], v[2], v[3]}) p.push_back(t.detach().requires_grad_());
        auto hy = nn::functional::add_layer_norm(p[0], p[1], p[2], p[3]);
        sum(mul(hy[0], v[4]) + mul(hy[1], v[5])).backward();
        std::vector<Tensor> parts{hy[0].detach().to(kFloat64).flatten(), hy[1].detach().to(kFloat64).flatten()};
        for (const Tensor& t : p) parts.push_back(t.grad().to(kFloat64).flatten());
        return cat(parts);
      };
      parity("add_layer_norm", {x, r, w, b, gh, gy}, run, dt == kBFloat16 || dt == kFloat16 ? 2e-2 : tol_for(dt) * 10);
    }
}

TEST_CASE("cuda parity: the fused cross-entropy, 16-bit logits read as they are, ignore_index and smoothing") {
  // One kernel each way on the GPU (cuda/cross_entropy.cu), the composed default on the CPU.
  // Tolerances: 1e-5 for f32 (exp_approx, sums in another order), 2e-2 for the 16-bit gradients
  // (one rounding), the loss within 1e-4 for every dtype (f32 math either way).
  if (skip_without_gpu()) return;
  manual_seed(31);
  for (DType dt : {kFloat32, kFloat64, kBFloat16, kFloat16})
    for (int64_t C : {7, 50257})
      for (double eps : {0.0, 0.1}) {
        CAPTURE(dtype_name(dt));
        CAPTURE(C);
        CAPTURE(eps);
        const int64_t N = C > 1000 ? 24 : 300;
        const Tensor logits = (randn({N, C}) * 2.0).to(dt);
        Generator g(5);
        Tensor t = randint(0, C, {N}, DType::i64, &g);
        t.narrow(0, 0, 3).fill_(-100);  // ignored rows
        for (auto red : {nn::functional::Reduction::mean, nn::functional::Reduction::none}) {
          auto run = [&](const std::vector<Tensor>& v) {
            Tensor x = v[0].detach().requires_grad_();
            Tensor loss = nn::functional::cross_entropy(x, v[1], -100, eps, red);
            sum(loss).backward();
            CHECK(x.grad().dtype() == dt);
            return cat({loss.to(kFloat64).flatten(), x.grad().to(kFloat64).flatten()});
          };
          parity("cross_entropy", {logits, t}, run, dt == kFloat64 ? 1e-10 : (dt == kFloat32 ? 1e-5 : 2e-2));
        }
      }
}

TEST_CASE("cuda parity: conv2d through cuDNN and pooling, forward and backward") {
  if (skip_without_gpu()) return;
  namespace F = nn::functional;
  manual_seed(8);
  for (DType dt : {kFloat32, kFloat64, kFloat16}) {
    CAPTURE(dtype_name(dt));
    const double tol = dt == kFloat64 ? 1e-10 : (dt == kFloat32 ? 1e-4 : 2e-2);
    const Tensor x = randn({2, 4, 9, 11}).to(dt), w = randn({6, 2, 3, 3}).to(dt), b = randn({6}).to(dt);
    parity(
        "conv2d grouped, strided, padded, dilated", {x, w, b},
        [&](const std::vector<Tensor>& v) {
          return F::conv2d(v[0], v[1], v[2], {2, 1}, {1, 2}, {1, 2}, 2);
        },
        tol);
    if (dt != kFloat16) {
      auto grads = [&](const std::vector<Tensor>& v) {
        Tensor xs = v[0].detach(), ws = v[1].detach(), bs = v[2].detach();
        xs.requires_grad_();
        ws.requires_grad_();
        bs.requires_grad_();
        Tensor y = F::conv2d(xs, ws, bs, {1, 1}, {1, 1}, {1, 1}, 2);
        sum(mul(y, y)).backward();
        return cat({xs.grad().flatten(), ws.grad().flatten(), bs.grad()});
      };
      parity("conv2d backward", {x, w, b}, grads, dt == kFloat32 ? 1e-3 : 1e-9);
    }
    // Without gradients max pooling takes no indices and goes to cuDNN; with
    // them, the own kernel (pool.cu). Average pooling is cuDNN's either way.
    parity(
        "max_pool2d (cuDNN)", {x},
        [&](const std::vector<Tensor>& v) {
          return F::max_pool2d(v[0], {3, 2}, {2, 2}, {1, 1});
        },
        0);
    parity(
        "max_pool2d (own kernel, indices)", {x},
        [&](const std::vector<Tensor>& v) {
          Tensor xs = v[0].detach();
          xs.requires_grad_();
          return F::max_pool2d(xs, {3, 2}, {2, 2}, {1, 1}).detach();
        },
        0);
    parity(
        "avg_pool2d", {x},
        [&](const std::vector<Tensor>& v) {
          return F::avg_pool2d(v[0], {3, 3}, {2, 1}, {1, 0});
        },
        tol);
    {
      // NaN wins a max window on both paths, as on the CPU.
      Tensor xn = x.clone();
      raw::fill_(xn.narrow(2, 4, 1).narrow(3, 5, 1), std::nan(""));
      parity(
          "max_pool2d NaN (cuDNN)", {xn},
          [&](const std::vector<Tensor>& v) {
            return F::max_pool2d(v[0], {2, 2});
          },
          0);
    }
    parity(
        "adaptive_avg_pool2d", {x},
        [&](const std::vector<Tensor>& v) {
          return F::adaptive_avg_pool2d(v[0], {4, 5});
        },
        tol);
    if (dt != kFloat16) {
      auto pool_grads = [&](const std::vector<Tensor>& v) {
        Tensor xs = v[0].detach();
        xs.requires_grad_();
        Tensor y = add(add(F::max_pool2d(xs, {2, 2}).sum(), F::adaptive_avg_pool2d(xs, {3, 3}).sum()),
                       F::avg_pool2d(xs, {3, 3}, {2, 1}, {1, 0}).sum());
        y.backward();
        return xs.grad();
      };
      parity("pooling backward", {x}, pool_grads, tol);
    }
  }
}

TEST_CASE(
    "cuda parity: a GPT training step (cross-entropy, embedding, attention, layer norm) gives the CPU's loss and "
    "gradients") {
  if (skip_without_gpu()) return;
  nn::models::GPTConfig cfg;
  cfg.vocab = 11, cfg.block = 8, cfg.layers = 2, cfg.heads = 2, cfg.embd = 16;
  manual_seed(9);
  nn::models::GPT cpu_net(cfg);
  manual_seed(9);
  nn::models::GPT gpu_net(cfg);
  gpu_net.to(kGpu);
  const Tensor seq = randint(0, cfg.vocab, Shape{3, cfg.block + 1});
  const Tensor x = seq.narrow(1, 0, cfg.block).contiguous(), y = seq.narrow(1, 1, cfg.block).contiguous();
  Tensor lc = cpu_net.loss(x, y), lg = gpu_net.loss(x.to(kGpu), y.to(kGpu));
  check_close(lg, lc, 1e-5, "loss");
  lc.backward();
  lg.backward();
  const auto pc = cpu_net.parameters(), pg = gpu_net.parameters();
  REQUIRE(pc.size() == pg.size());
  for (size_t i = 0; i < pc.size(); ++i) check_close(pg[i].grad(), pc[i].grad(), 1e-4, str("grad of parameter ", i));
}

TEST_CASE("cuda: caching allocator on device memory, stream-aware reuse, pinned staging") {
  if (skip_without_gpu()) return;
  cuda::ensure_registered();
  const std::size_t before = memory::allocated(kGpu);
  void* p = memory::allocate(kGpu, 1 << 20);
  CHECK(memory::allocated(kGpu) >= before + (1 << 20));
  memory::deallocate(kGpu, p);
  const std::size_t reserved = memory::reserved(kGpu);
  void* q = memory::allocate(kGpu, 1 << 20);
  CHECK(memory::reserved(kGpu) == reserved);  // served from the cache, no cudaMalloc
  // Used on a second stream: not reused until that stream's event completes.
  const cuda::StreamHandle side = cuda::create_stream();
  const Tensor big = randn({2048, 2048}, TensorOptions(kFloat32, kGpu));
  cuda::stream_wait(side, 0);  // side waits for big, then the default stream keeps the GEMMs queued
  memory::record_stream(kGpu, q, side);
  memory::deallocate(kGpu, q);
  for (int i = 0; i < 4; ++i) (void)matmul(big, big);  // keep the device busy while the event is pending
  cuda::synchronize_stream(side);
  cuda::synchronize();
  const cuda::EventHandle e0 = cuda::record_event(0);
  (void)matmul(big, big);
  const cuda::EventHandle e1 = cuda::record_event(0);
  cuda::synchronize_event(e1);
  CHECK(cuda::event_done(e1));
  CHECK(cuda::elapsed_ms(e0, e1) > 0.0);
  cuda::destroy_event(e0);
  cuda::destroy_event(e1);
  // (big and the GEMMs' outputs have grown the cache since `reserved`.)
  const std::size_t held = memory::reserved(kGpu);
  void* r = memory::allocate(kGpu, 1 << 20);  // processes the (now complete) event first
  CHECK(memory::reserved(kGpu) == held);      // the recorded block came back to the pool: no cudaMalloc
  memory::deallocate(kGpu, r);
  cuda::destroy_stream(side);
  memory::empty_cache(kGpu);                                      // waits for events, returns segments with cudaFree
  CHECK(memory::reserved(kGpu) < held);                           // the GEMM outputs' segments went back
  CHECK(memory::reserved(kGpu) >= std::size_t(2048) * 2048 * 4);  // big's is still in use
  void* h = cuda::pinned_allocate(4096);
  CHECK(h != nullptr);
  static_cast<char*>(h)[4095] = 1;  // host-accessible
  cuda::pinned_free(h);
  void* h2 = cuda::pinned_allocate(4096);
  CHECK(h2 == h);  // the pinned pool is used by nothing else here
  cuda::pinned_free(h2);
}

namespace {

Tensor leaf(const Tensor& t) {
  Tensor p = t.detach();
  p.requires_grad_(true);
  return p;
}

using MakeOptimizer = std::function<std::unique_ptr<nn::optim::Optimizer>(std::vector<Tensor>)>;

// Three steps of the same optimizer on CPU parameters and on their GPU copies,
// fed the same gradients; the GPU steps must go through the fused kernel
// (`fused_op` recorded on cuda:0 once per parameter and step).
void optimizer_parity(const std::string& what, DType dt, const MakeOptimizer& make, const char* fused_op) {
  CAPTURE(what);
  CAPTURE(dtype_name(dt));
  manual_seed(11);
  // 70001 elements: several blocks and a ragged last one.
  const std::vector<Shape> shapes = {{33, 17}, {70001}, {5}};
  std::vector<Tensor> pc, pg;
  for (const Shape& s : shapes) {
    const Tensor t = randn(s).to(dt);
    pc.push_back(leaf(t));
    pg.push_back(leaf(t.to(kGpu)));
  }
  auto oc = make(pc), og = make(pg);
  int64_t fused_calls = 0;
  for (int step = 0; step < 3; ++step) {
    for (size_t i = 0; i < shapes.size(); ++i) {
      const Tensor g = randn(shapes[i]).to(dt);
      pc[i].set_grad(g);
      pg[i].set_grad(g.to(kGpu));
    }
    oc->step();
    profiler::Profile prof;
    og->step();
    cuda::synchronize();
    prof.stop();
    for (const auto& e : prof.events()) fused_calls += e.name == fused_op && e.device == kGpu;
  }
  CHECK(fused_calls == int64_t(3 * shapes.size()));
  for (size_t i = 0; i < shapes.size(); ++i)
    check_close(pg[i].detach(), pc[i].detach(), dt == kFloat32 ? 1e-5 : 1e-2, str("parameter ", i));
  const nn::NamedTensors sc = oc->state_dict(), sg = og->state_dict();
  REQUIRE(sc.size() == sg.size());
  for (size_t i = 0; i < sc.size(); ++i) {
    REQUIRE(sc[i].first == sg[i].first);
    if (sc[i].first.rfind("state.", 0) == 0) check_close(sg[i].second, sc[i].second, 1e-5, sc[i].first);
  }
}

}  // namespace

TEST_CASE("cuda parity: fused SGD, Adam and AdamW updates (f32 parameters, f16/bf16 with f32 masters)") {
  if (skip_without_gpu()) return;
  using namespace nn::optim;
  const std::vector<std::pair<std::string, SGDOptions>> sgd = {
      {"sgd plain", {.lr = 0.1}},
      {"sgd momentum, dampening", {.lr = 0.05, .momentum = 0.8, .dampening = 0.3}},
      {"sgd nesterov, weight decay", {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true}},
  };
  for (DType dt : {kFloat32, kFloat16, kBFloat16}) {
    for (const auto& [name, o] : sgd)
      optimizer_parity(
          name, dt, [o = o](std::vector<Tensor> ps) { return std::make_unique<SGD>(ps, o); }, "fused_sgd");
    const AdamOptions ao{.lr = 1e-2, .weight_decay = 0.1};
    optimizer_parity(
        "adam (L2)", dt, [&](std::vector<Tensor> ps) { return std::make_unique<Adam>(ps, ao); }, "fused_adam");
    const AdamWOptions awo{.lr = 1e-2, .weight_decay = 0.1};
    optimizer_parity(
        "adamw", dt, [&](std::vector<Tensor> ps) { return std::make_unique<AdamW>(ps, awo); }, "fused_adam");
  }
}

TEST_CASE("cuda parity: the loss scaler's unscale and inf/NaN check") {
  if (skip_without_gpu()) return;
  struct Case {
    const char* name;
    double scale;      // init_scale
    double magnitude;  // of the gradients
    int poison;        // 0: clean; 1: inf in the f16 gradient, NaN in the f64 one; 2: overflow when unscaling
  };
  const std::vector<Case> cases = {{"clean", 1024, 1024, 0},
                                   {"inf and NaN", 1024, 1024, 1},
                                   {"overflow on unscale (scale < 1)", 1.0 / 1024, 1e36, 2}};
  for (const Case& c : cases) {
    CAPTURE(c.name);
    manual_seed(5);
    // f32 (its gradient a transposed view), f16, bf16, f64; 3000 elements spans blocks.
    const std::vector<std::pair<DType, Shape>> specs = {
        {kFloat32, {7, 3}}, {kFloat16, {3000}}, {kBFloat16, {40, 5}}, {kFloat64, {9}}};
    std::vector<Tensor> pc, pg;
    for (size_t i = 0; i < specs.size(); ++i) {
      const auto& [dt, shape] = specs[i];
      const Tensor t = randn(shape).to(dt);
      pc.push_back(leaf(t));
      pg.push_back(leaf(t.to(kGpu)));
      const double mag = c.poison == 2 && dt != kFloat32 ? 1.0 : c.magnitude;  // only f32 overflows in case 2
      Tensor g = i == 0 ? (randn({3, 7}) * mag).t() : (randn(shape) * mag).to(dt);
      if (c.poison == 1 && (dt == kFloat16 || dt == kFloat64)) {
        g = g.contiguous();
        g.narrow(0, dt == kFloat16 ? 5 : 0, 1)
            .fill_(dt == kFloat16 ? std::numeric_limits<double>::infinity() : std::nan(""));
      }
      pc[i].set_grad(g);
      pg[i].set_grad(g.to(kGpu));
    }
    nn::optim::SGD oc(pc, {.lr = 0.1}), og(pg, {.lr = 0.1});
    nn::amp::GradScaler sc({.init_scale = c.scale}), sg({.init_scale = c.scale});
    sc.unscale_(oc);
    sg.unscale_(og);
    CHECK(sg.overflow_report() == sc.overflow_report());
    CHECK(sc.overflow_report().empty() == (c.poison == 0));
    for (size_t i = 0; i < specs.size(); ++i) {
      CHECK(pg[i].grad().dtype() == (specs[i].first == kFloat64 ? kFloat64 : kFloat32));
      check_close(pg[i].grad(), pc[i].grad(), 0, str("unscaled gradient ", i));
    }
    CHECK(sg.step(og) == sc.step(oc));  // skipped together when a gradient is not finite
    for (size_t i = 0; i < specs.size(); ++i) check_close(pg[i].detach(), pc[i].detach(), 1e-2, str("parameter ", i));
  }
}

TEST_CASE("cuda parity: work under a StreamGuard runs on that stream, from its pool, and matches the CPU") {
  if (skip_without_gpu()) return;
  manual_seed(3);
  const Tensor a = randn({64, 96}), b = randn({96, 32});
  const Tensor ga = a.to(kGpu), gb = b.to(kGpu);
  const cuda::StreamHandle side = cuda::create_stream();
  cuda::stream_wait(side, 0);  // side sees ga and gb, written on the default stream
  Tensor gy, gs;
  {
    memory::StreamGuard guard(kGpu, side);
    CHECK(memory::current_stream(kGpu) == side);
    gy = relu(matmul(ga, gb));  // cuBLAS with side's workspace, then a kernel, on side
    gs = gy.sum({1});
    const Tensor back = gs.to(kCPU);  // waits for side only
    const Tensor want = relu(matmul(a, b)).sum({1});
    const auto g = back.to_vector<double>(), w = want.to_vector<double>();
    for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - w[i]) <= 1e-4 * std::max(1.0, std::fabs(w[i])));
  }
  CHECK(memory::current_stream(kGpu) == 0);
  check_close(gy, relu(matmul(a, b)), 1e-4, "matmul + relu on a side stream");
  cuda::synchronize();
  gy = Tensor();
  gs = Tensor();
  cuda::destroy_stream(side);
}
