// SPDX-License-Identifier: MIT
// The host-side logic of the CUDA backend, checked on the CPU in every build
// (no GPU needed): the elementwise geometry kernels index with
// (cuda/geometry.h) and the mapping of a row-major batched matmul onto a
// column-major cuBLAS call (cuda/gemm_plan.h), run here through a reference
// GEMM with cuBLAS's semantics and compared with the CPU matmul.
#include <doctest/doctest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include <snug/autograd/ops.h>
#include <snug/core/backend.h>
#include <snug/core/generator.h>
#include <snug/core/raw_ops.h>
#include <snug/cuda/gemm_plan.h>
#include <snug/cuda/geometry.h>
#include <snug/cuda/plan.h>

using namespace snug;

namespace {

// Brute-force offset of element i (row-major over shape) for given strides.
int64_t brute_offset(int64_t i, const std::vector<int64_t>& shape, const std::vector<int64_t>& strides) {
  int64_t off = 0;
  for (int64_t d = int64_t(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

}  // namespace

TEST_CASE("cuda geometry: offsets equal the row-major walk for strided, broadcast and permuted operands") {
  std::mt19937 rng(7);
  int checked = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int nd = std::uniform_int_distribution<int>(0, 5)(rng);
    std::vector<int64_t> shape(nd);
    for (auto& s : shape) s = std::uniform_int_distribution<int>(1, 4)(rng);
    std::array<std::vector<int64_t>, 3> st;
    for (int k = 0; k < 3; ++k) {
      // A dense layout in a random dim order, sometimes with gaps, sometimes broadcast dims.
      std::vector<int> order(nd);
      std::iota(order.begin(), order.end(), 0);
      if (k > 0) std::shuffle(order.begin(), order.end(), rng);
      st[k].assign(nd, 0);
      int64_t stride = std::uniform_int_distribution<int>(1, 2)(rng);
      for (int j = nd - 1; j >= 0; --j) {
        const int d = order[j];
        const bool bcast = k > 0 && std::uniform_int_distribution<int>(0, 4)(rng) == 0;
        st[k][d] = bcast ? 0 : stride;
        if (!bcast) stride *= shape[d] + (std::uniform_int_distribution<int>(0, 3)(rng) == 0 ? 1 : 0);
      }
    }
    const auto g = cuda::make_geometry<3>(shape, st);
    int64_t numel = 1;
    for (auto s : shape) numel *= s;
    REQUIRE(g.numel == numel);
    CHECK(g.ndim <= nd);
    for (int64_t i = 0; i < numel; ++i) {
      int64_t off[3];
      g.offsets(i, off);
      for (int k = 0; k < 3; ++k) {
        if (off[k] != brute_offset(i, shape, st[k])) {
          FAIL_CHECK("trial " << trial << " element " << i << " operand " << k << ": " << off[k] << " vs "
                              << brute_offset(i, shape, st[k]));
        }
        ++checked;
      }
    }
  }
  CHECK(checked > 1000);
}

TEST_CASE("cuda geometry: dense operands coalesce to one dim and skip the division") {
  const auto g = cuda::make_geometry<2>({2, 3, 4}, {std::vector<int64_t>{12, 4, 1}, std::vector<int64_t>{12, 4, 1}});
  CHECK(g.ndim == 1);
  CHECK(g.dense);
  CHECK(g.sizes[0] == 24);
  // A transposed operand keeps two dims and is not dense.
  const auto t = cuda::make_geometry<2>({3, 4}, {std::vector<int64_t>{4, 1}, std::vector<int64_t>{1, 3}});
  CHECK(t.ndim == 2);
  CHECK(!t.dense);
  // A 0-d loop (one element) is dense with offset 0.
  const auto s = cuda::make_geometry<1>({}, {std::vector<int64_t>{}});
  CHECK(s.numel == 1);
  int64_t off[1] = {-1};
  s.offsets(0, off);
  CHECK(off[0] == 0);
  // A dim of size 0 gives an empty loop.
  CHECK(cuda::make_geometry<1>({3, 0}, {std::vector<int64_t>{0, 1}}).numel == 0);
  CHECK_THROWS_AS(cuda::make_geometry<1>(std::vector<int64_t>(17, 1), {std::vector<int64_t>(17, 1)}), ShapeError);
}

TEST_CASE("cuda geometry: broadcast_strides right-aligns and zeroes size-1 dims") {
  CHECK(cuda::broadcast_strides({3, 1}, {1, 1}, {2, 3, 4}) == std::vector<int64_t>{0, 1, 0});
  CHECK(cuda::broadcast_strides({}, {}, {5}) == std::vector<int64_t>{0});
}

namespace {

// Runs a (B,M,K) @ b (B,K,N) through the cuBLAS plan and the reference
// column-major GEMM; returns out (B,M,N).
Tensor gemm_via_plan(const Tensor& a, const Tensor& b) {
  Tensor ac = a, bc = b;
  auto pa = cuda::plan_gemm_operand(ac.shape().data(), ac.strides().data());
  auto pb = cuda::plan_gemm_operand(bc.shape().data(), bc.strides().data());
  if (!pa.ok) {
    ac = raw::contiguous(a);
    pa = cuda::plan_gemm_operand(ac.shape().data(), ac.strides().data());
  }
  if (!pb.ok) {
    bc = raw::contiguous(b);
    pb = cuda::plan_gemm_operand(bc.shape().data(), bc.strides().data());
  }
  REQUIRE(pa.ok);
  REQUIRE(pb.ok);
  const int64_t B = std::max(a.size(0), b.size(0)), M = a.size(1), K = a.size(2), N = b.size(2);
  const auto g = cuda::plan_gemm(B, M, N, K, pa, pb);
  // cuBLAS requires these; a plan that breaks them would fail on the GPU.
  CHECK(g.lda >= std::max<int64_t>(1, g.trans_a ? g.k : g.m));
  CHECK(g.ldb >= std::max<int64_t>(1, g.trans_b ? g.n : g.k));
  CHECK(g.ldc >= std::max<int64_t>(1, g.m));
  Tensor out = zeros({B, M, N}, TensorOptions(kFloat64));
  cuda::reference_gemm<double>(g, static_cast<const double*>(bc.data_ptr()), static_cast<const double*>(ac.data_ptr()),
                               static_cast<double*>(out.data_ptr()));
  return out;
}

void check_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  const auto g = got.to_vector<double>(), w = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < g.size(); ++i) worst = std::max(worst, std::fabs(g[i] - w[i]));
  CHECK(worst < 1e-9);
}

}  // namespace

TEST_CASE("cuda gemm plan: every operand layout matmul meets gives the CPU result") {
  manual_seed(3);
  const TensorOptions f64(kFloat64);
  const int64_t B = 3, M = 5, K = 7, N = 4;
  const Tensor a = randn({B, M, K}, f64), b = randn({B, K, N}, f64);
  SUBCASE("contiguous") { check_same(gemm_via_plan(a, b), raw::matmul(a, b)); }
  SUBCASE("transposed views (x.t(), k.transpose(-2, -1))") {
    const Tensor at = randn({B, K, M}, f64).transpose(1, 2), bt = randn({B, N, K}, f64).transpose(1, 2);
    check_same(gemm_via_plan(at, bt), raw::matmul(at, bt));
    check_same(gemm_via_plan(a, bt), raw::matmul(a, bt));
    check_same(gemm_via_plan(at, b), raw::matmul(at, b));
  }
  SUBCASE("broadcast batch (stride 0)") {
    const Tensor w = randn({1, K, N}, f64).expand({B, K, N});
    check_same(gemm_via_plan(a, w), raw::matmul(a, w));
  }
  SUBCASE("row slices with a padded leading dimension") {
    const Tensor wide = randn({B, M, K + 3}, f64).narrow(2, 1, K);
    check_same(gemm_via_plan(wide, b), raw::matmul(wide, b));
  }
  SUBCASE("a layout cuBLAS cannot take is copied first") {
    const Tensor odd = randn({B, M, 2 * K}, f64).slice(2, 0, 2 * K, 2);  // column stride 2
    CHECK_FALSE(cuda::plan_gemm_operand(odd.shape().data(), odd.strides().data()).ok);
    check_same(gemm_via_plan(odd, b), raw::matmul(odd, b));
  }
  SUBCASE("vectors: M == 1 and N == 1") {
    const Tensor row = randn({B, 1, K}, f64), col = randn({B, K, 1}, f64);
    check_same(gemm_via_plan(row, b), raw::matmul(row, b));
    check_same(gemm_via_plan(a, col), raw::matmul(a, col));
    check_same(gemm_via_plan(row, col), raw::matmul(row, col));
  }
}

TEST_CASE("cuda pooling: the kernels' per-element work equals the CPU pooling, forward and backward") {
  std::mt19937 rng(11);
  Backend& cpu = backend_for(kCPU);
  int cases = 0;
  for (int trial = 0; trial < 200; ++trial) {
    auto pick = [&](int lo, int hi) { return int64_t(std::uniform_int_distribution<int>(lo, hi)(rng)); };
    Pool2dParams p;
    p.kind = PoolKind(pick(0, 2));
    const int64_t N = pick(1, 2), C = pick(1, 3), H = pick(1, 8), W = pick(1, 8);
    int64_t Ho, Wo;
    if (p.kind == PoolKind::adaptive_avg) {
      Ho = pick(1, 9);
      Wo = pick(1, 9);
    } else {
      for (int d = 0; d < 2; ++d) {
        p.kernel[d] = pick(1, 3);
        p.stride[d] = pick(1, 3);
        p.padding[d] = pick(0, int(p.kernel[d] / 2));
      }
      Ho = (H + 2 * p.padding[0] - p.kernel[0]) / p.stride[0] + 1;
      Wo = (W + 2 * p.padding[1] - p.kernel[1]) / p.stride[1] + 1;
      if (Ho < 1 || Wo < 1) continue;
    }
    const DType dt = trial % 2 ? kFloat64 : kFloat32;
    CAPTURE(trial);
    const Tensor x = randn({N, C, H, W}, TensorOptions(dt));
    const Tensor out = empty({N, C, Ho, Wo}, TensorOptions(dt));
    const Tensor idx = p.kind == PoolKind::max ? empty({N, C, Ho, Wo}, TensorOptions(kInt64)) : Tensor();
    cpu.pool2d(x, p, out, idx);
    const Tensor gout = randn({N, C, Ho, Wo}, TensorOptions(dt));
    const Tensor gx = empty({N, C, H, W}, TensorOptions(dt));
    cpu.pool2d_backward(gout, p, idx, gx);

    const PoolGeometry g = pool_geometry(p, N * C, H, W, Ho, Wo);
    const Tensor out2 = empty(out.shape(), TensorOptions(dt)), gx2 = empty(gx.shape(), TensorOptions(dt));
    const Tensor idx2 = empty({N, C, Ho, Wo}, TensorOptions(kInt64));
    dispatch_floating(dt, "test", [&]<class T>() {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        for (int64_t e = 0; e < out.numel(); ++e)
          pool_forward_at(g, x.data<T>(), out2.data<T>(), idx2.data<int64_t>(), e);
        const int64_t* ip = p.kind == PoolKind::max ? idx2.data<int64_t>() : nullptr;
        for (int64_t e = 0; e < gx.numel(); ++e) pool_backward_at(g, gout.data<T>(), ip, gx2.data<T>(), e);
      }
    });
    CHECK(out2.to_vector<double>() == out.to_vector<double>());
    if (p.kind == PoolKind::max) CHECK(idx2.to_vector<int64_t>() == idx.to_vector<int64_t>());
    CHECK(gx2.to_vector<double>() == gx.to_vector<double>());
    ++cases;
  }
  CHECK(cases > 100);
}

// The plans of cuda/plan.h drive host loops that do what the kernels do
// (reduce.cu, softmax.cu, index.cu: one walk per kept position or row); the
// results must equal the CPU backend's on strided, transposed and sliced f64 tensors.
TEST_CASE("cuda plans: reductions, arg reductions, softmax rows, gather and scatter equal the CPU backend") {
  Backend& cpu = backend_for(kCPU);
  manual_seed(21);
  const TensorOptions f64(kFloat64);
  // x (4, 5, 6) seen through a permutation and a slice, so no dim is dense.
  const Tensor base = randn({6, 10, 4}, f64);
  const Tensor x = base.permute({2, 0, 1}).slice(2, 1, 10, 2).contiguous().transpose(0, 2);  // (5, 6, 4) strided
  REQUIRE_FALSE(x.is_contiguous());
  const Shape xs = x.shape();

  SUBCASE("reduce: sum and max over every set of dims, into a strided out") {
    for (std::vector<int64_t> dims : {std::vector<int64_t>{0}, {1}, {2}, {0, 2}, {0, 1, 2}}) {
      CAPTURE(dims.size());
      Shape os = xs;
      for (int64_t d : dims) os[d] = 1;
      for (ReduceOp op : {ReduceOp::sum, ReduceOp::max}) {
        const Tensor want = empty(os, f64);
        cpu.reduce(op, x, dims, want);
        const Tensor got = empty({os[2], os[1], os[0]}, f64).permute({2, 1, 0});  // a strided out
        const cuda::ReducePlan p = cuda::plan_reduce(xs, x.strides(), got.strides(), dims);
        for (int64_t k = 0; k < p.kept.numel; ++k) {
          int64_t ko[2];
          p.kept.offsets(k, ko);
          double acc = op == ReduceOp::sum ? 0.0 : -INFINITY;
          for (int64_t j = 0; j < p.red.numel; ++j) {
            int64_t ro[1];
            p.red.offsets(j, ro);
            const double v = x.data<double>()[ko[0] + ro[0]];
            acc = op == ReduceOp::sum ? acc + v : std::max(acc, v);
          }
          got.data<double>()[ko[1]] = acc;
        }
        const auto g = got.to_vector<double>(), w = want.to_vector<double>();
        for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - w[i]) < 1e-12);
      }
    }
  }
  SUBCASE("arg_reduce and softmax rows along every dim") {
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      Shape os = xs;
      os[dim] = 1;
      const Tensor want = empty(os, TensorOptions(kInt64)), got = empty(os, TensorOptions(kInt64));
      cpu.arg_reduce(true, x, dim, want);
      const cuda::RowPlan<2> p = cuda::plan_rows<2>(xs, {x.strides(), got.strides()}, dim);
      for (int64_t r = 0; r < p.rows.numel; ++r) {
        int64_t o[2];
        p.rows.offsets(r, o);
        const double* row = x.data<double>() + o[0];
        int64_t bi = 0;
        for (int64_t i = 1; i < p.len; ++i)
          if (row[i * p.step[0]] > row[bi * p.step[0]]) bi = i;
        got.data<int64_t>()[o[1]] = bi;
      }
      CHECK(got.to_vector<int64_t>() == want.to_vector<int64_t>());

      const Tensor sw = empty(xs, f64), sg = empty(xs, f64);
      cpu.softmax(x, dim, false, sw);
      const cuda::RowPlan<2> q = cuda::plan_rows<2>(xs, {x.strides(), sg.strides()}, dim);
      for (int64_t r = 0; r < q.rows.numel; ++r) {
        int64_t o[2];
        q.rows.offsets(r, o);
        const double* xr = x.data<double>() + o[0];
        double* yr = sg.data<double>() + o[1];
        double m = -INFINITY, sum = 0;
        for (int64_t i = 0; i < q.len; ++i) m = std::max(m, xr[i * q.step[0]]);
        for (int64_t i = 0; i < q.len; ++i) sum += std::exp(xr[i * q.step[0]] - m);
        for (int64_t i = 0; i < q.len; ++i) yr[i * q.step[1]] = std::exp(xr[i * q.step[0]] - m) / sum;
      }
      const auto g = sg.to_vector<double>(), w = sw.to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) CHECK(std::fabs(g[i] - w[i]) < 1e-12);
    }
  }
  SUBCASE("gather, index_select, scatter_add, index_add") {
    const Tensor idx1 = from_vector<int64_t>({3, 0, 3, 1}, {4}, TensorOptions(kInt64));
    for (int64_t dim = 0; dim < 3; ++dim) {
      CAPTURE(dim);
      // index_select: gather with the 1-D index broadcast along dim.
      Shape os = xs;
      os[dim] = 4;
      const Tensor want = empty(os, f64), got = empty(os, f64);
      cpu.index_select(x, dim, idx1, want);
      const cuda::GatherPlan gp =
          cuda::plan_gather(os, got.strides(), cuda::index_strides_along(os, dim, idx1.strides()[0]), x.strides(), dim);
      for (int64_t e = 0; e < gp.g.numel; ++e) {
        int64_t o[3];
        gp.g.offsets(e, o);
        got.data<double>()[o[0]] = x.data<double>()[o[2] + idx1.data<int64_t>()[o[1]] * gp.jump];
      }
      CHECK(got.to_vector<double>() == want.to_vector<double>());
      // index_add: out (xs) += src (os) at rows idx1 along dim, repeated rows add in order.
      const Tensor src = randn(os, f64);
      const Tensor aw = x.contiguous().clone(), ag = x.contiguous().clone();
      cpu.index_add(aw, dim, idx1, src);
      const cuda::ScatterPlan sp = cuda::plan_scatter(
          os, ag.strides(), cuda::index_strides_along(os, dim, idx1.strides()[0]), src.strides(), dim);
      for (int64_t e = 0; e < sp.outer.numel; ++e) {
        int64_t o[3];
        sp.outer.offsets(e, o);
        for (int64_t j = 0; j < sp.len; ++j) {
          const int64_t k = idx1.data<int64_t>()[o[1] + j * sp.istep];
          ag.data<double>()[o[0] + k * sp.ostep] += src.data<double>()[o[2] + j * sp.sstep];
        }
      }
      CHECK(ag.to_vector<double>() == aw.to_vector<double>());
    }
    // gather / scatter_add with a full index along dim 1 of a transposed x.
    const Tensor gi = from_vector<int64_t>({0, 2, 1, 1, 0, 2, 2, 2}, {2, 4}, TensorOptions(kInt64));
    const Tensor xt = randn({3, 2}, f64).t();  // (2, 3) transposed
    const Tensor gw = empty({2, 4}, f64), gg = empty({2, 4}, f64);
    cpu.gather(xt, 1, gi, gw);
    const cuda::GatherPlan gp = cuda::plan_gather({2, 4}, gg.strides(), gi.strides(), xt.strides(), 1);
    for (int64_t e = 0; e < gp.g.numel; ++e) {
      int64_t o[3];
      gp.g.offsets(e, o);
      gg.data<double>()[o[0]] = xt.data<double>()[o[2] + gi.data<int64_t>()[o[1]] * gp.jump];
    }
    CHECK(gg.to_vector<double>() == gw.to_vector<double>());
    const Tensor sw = zeros({2, 3}, f64), sg = zeros({2, 3}, f64), src = randn({2, 4}, f64);
    cpu.scatter_add(sw, 1, gi, src);
    const cuda::ScatterPlan sp = cuda::plan_scatter({2, 4}, sg.strides(), gi.strides(), src.strides(), 1);
    for (int64_t e = 0; e < sp.outer.numel; ++e) {
      int64_t o[3];
      sp.outer.offsets(e, o);
      for (int64_t j = 0; j < sp.len; ++j) {
        const int64_t k = gi.data<int64_t>()[o[1] + j * sp.istep];
        sg.data<double>()[o[0] + k * sp.ostep] += src.data<double>()[o[2] + j * sp.sstep];
      }
    }
    CHECK(sg.to_vector<double>() == sw.to_vector<double>());
  }
}
