// SPDX-License-Identifier: MIT
// cuda/lt_plan.h on the CPU: which cuBLASLt epilogue each of a Linear's GEMMs
// takes and what runs after it, the layouts of the three GEMMs (run through a
// reference column-major GEMM with the epilogues' semantics and compared with
// the row-major definition), and the keys algorithms are cached by.
#include <doctest/doctest.h>

#include <cmath>
#include <random>
#include <unordered_set>
#include <vector>

#include <snug/cuda/lt_plan.h>

using namespace snug::cuda;

TEST_CASE("lt plan: the forward epilogue for each activation, bias and pre-activation") {
  using E = LtEpilogue;
  struct Row {
    LtAct act;
    bool bias, pre, aux_ok;
    E ep;
    bool into_pre, act_after, copy_after;
  };
  const Row rows[] = {
      {LtAct::none, false, false, true, E::none, false, false, false},
      {LtAct::none, true, false, true, E::bias, false, false, false},
      {LtAct::none, true, true, true, E::bias, false, false, true},
      {LtAct::relu, true, false, true, E::relu_bias, false, false, false},
      {LtAct::relu, false, false, true, E::relu, false, false, false},
      {LtAct::relu, true, true, true, E::bias, true, true, false},  // ReLU's aux is a bit mask
      {LtAct::gelu_tanh, true, false, true, E::gelu_bias, false, false, false},
      {LtAct::gelu_tanh, false, false, true, E::gelu, false, false, false},
      {LtAct::gelu_tanh, true, true, true, E::gelu_aux_bias, false, false, false},
      {LtAct::gelu_tanh, false, true, true, E::gelu_aux, false, false, false},
      {LtAct::gelu_tanh, true, true, false, E::bias, true, true, false},  // aux ld not a multiple of 8
      {LtAct::gelu, true, true, true, E::bias, true, true, false},         // exact GELU: no epilogue
      {LtAct::gelu, true, false, true, E::bias, false, true, false},       // ... in place on out
      {LtAct::gelu, false, false, true, E::none, false, true, false},
  };
  for (const Row& r : rows) {
    CAPTURE(static_cast<int>(r.act));
    CAPTURE(r.bias);
    CAPTURE(r.pre);
    CAPTURE(r.aux_ok);
    const LtForward f = choose_lt_forward(r.act, r.bias, r.pre, r.aux_ok);
    CHECK(f.epilogue == r.ep);
    CHECK(f.into_pre == r.into_pre);
    CHECK(f.act_after == r.act_after);
    CHECK(f.copy_after == r.copy_after);
  }
  CHECK(choose_lt_backward_act(LtAct::gelu_tanh, true) == E::dgelu);
  CHECK(choose_lt_backward_act(LtAct::gelu_tanh, false) == E::none);
  CHECK(choose_lt_backward_act(LtAct::gelu, true) == E::none);
  CHECK(choose_lt_backward_act(LtAct::relu, true) == E::none);
  CHECK(lt_aux_ld_ok(768));
  CHECK_FALSE(lt_aux_ld_ok(20));
  CHECK_FALSE(lt_aux_ld_ok(0));
}

namespace {

float gelu_tanh(float z) {
  const float k = std::sqrt(2.0f / 3.14159265358979f);
  return 0.5f * z * (1.0f + std::tanh(k * (z + 0.044715f * z * z * z)));
}
float gelu_tanh_grad(float z) {
  const float k = std::sqrt(2.0f / 3.14159265358979f);
  const float u = k * (z + 0.044715f * z * z * z), t = std::tanh(u);
  return 0.5f * (1.0f + t) + 0.5f * z * (1.0f - t * t) * k * (1.0f + 3.0f * 0.044715f * z * z);
}

// A 2-D matrix in a buffer with given strides (a transposed view when (1, rows)).
struct Mat {
  int64_t rows, cols, s0, s1;
  std::vector<float> buf;
  float& at(int64_t i, int64_t j) { return buf[i * s0 + j * s1]; }
};
Mat make(int64_t rows, int64_t cols, int layout, std::mt19937& rng) {
  // layout 0: row-major; 1: row-major with padded rows; 2: a transposed view (column-major).
  Mat m{rows, cols, 0, 0, {}};
  if (layout == 0) m.s0 = cols, m.s1 = 1;
  if (layout == 1) m.s0 = cols + 3, m.s1 = 1;
  if (layout == 2) m.s0 = 1, m.s1 = rows;
  m.buf.assign(static_cast<std::size_t>(rows * cols + 3 * rows + 8), 0.0f);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) m.at(i, j) = u(rng);
  return m;
}

// The column-major result D (m, n) of the call plan describes, with A = b's
// memory and B = a's memory (gemm_plan.h), then the epilogue as cuBLASLt
// documents it: bias per row of D, aux (m, n) with ld aux_ld, bgradb's sums
// of B over k per column of D.
std::vector<float> lt_reference(const GemmPlan& g, const float* a_mem, const float* b_mem, LtEpilogue ep,
                                const float* bias, std::vector<float>* aux, int64_t aux_ld, std::vector<float>* bgrad) {
  std::vector<float> d(static_cast<std::size_t>(g.ldc * g.n));
  reference_gemm<float>(g, b_mem, a_mem, d.data());
  for (int64_t j = 0; j < g.n; ++j)
    for (int64_t i = 0; i < g.m; ++i) {
      float& v = d[i + j * g.ldc];
      if (ep == LtEpilogue::bias || ep == LtEpilogue::gelu_aux_bias || ep == LtEpilogue::gelu_bias) v += bias[i];
      if (ep == LtEpilogue::gelu_aux_bias) (*aux)[i + j * aux_ld] = v;
      if (ep == LtEpilogue::gelu_aux_bias || ep == LtEpilogue::gelu_bias) v = gelu_tanh(v);
      if (ep == LtEpilogue::dgelu) v *= gelu_tanh_grad((*aux)[i + j * aux_ld]);
    }
  if (ep == LtEpilogue::bgradb) {
    // B (k, n) after its op: element (p, j) of op(B).
    bgrad->assign(static_cast<std::size_t>(g.n), 0.0f);
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t p = 0; p < g.k; ++p) (*bgrad)[j] += g.trans_b ? a_mem[j + p * g.ldb] : a_mem[p + j * g.ldb];
  }
  return d;
}

}  // namespace

TEST_CASE("lt plan: a Linear's forward, dgrad and wgrad GEMMs with their epilogues match the row-major math") {
  std::mt19937 rng(11);
  int cases = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t N = 1 + rng() % 7, in = 1 + rng() % 9, outf = 8 * (1 + rng() % 2);
    const int lx = rng() % 3, lw = rng() % 3, lg = rng() % 3;
    CAPTURE(N);
    CAPTURE(in);
    CAPTURE(outf);
    CAPTURE(lx);
    CAPTURE(lw);
    CAPTURE(lg);
    Mat x = make(N, in, lx, rng), w = make(outf, in, lw, rng), g = make(N, outf, lg, rng);
    std::vector<float> b(static_cast<std::size_t>(outf));
    for (auto& v : b) v = std::uniform_real_distribution<float>(-1, 1)(rng);
    const int64_t sx[2] = {x.s0, x.s1}, sw[2] = {w.s0, w.s1}, sg[2] = {g.s0, g.s1};

    // forward: out (N, out) row-major = gelu_tanh(x W^T + b), pre = x W^T + b.
    const LtGemm f = plan_linear_forward(N, in, outf, sx, sw);
    REQUIRE(f.ok);
    CHECK(f.plan.m == outf);
    CHECK(f.plan.ldc == outf);
    std::vector<float> pre(static_cast<std::size_t>(N * outf));
    const std::vector<float> out =
        lt_reference(f.plan, x.buf.data(), w.buf.data(), LtEpilogue::gelu_aux_bias, b.data(), &pre, outf, nullptr);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t o = 0; o < outf; ++o) {
        float s = b[o];
        for (int64_t i = 0; i < in; ++i) s += x.at(r, i) * w.at(o, i);
        CHECK(pre[r * outf + o] == doctest::Approx(s).epsilon(1e-5));
        CHECK(out[r * outf + o] == doctest::Approx(gelu_tanh(s)).epsilon(1e-5));
      }

    // dgrad with DGELU: gz (N, in) = (g W) * gelu'(z), z (N, in) contiguous.
    std::vector<float> z(static_cast<std::size_t>(N * in));
    for (auto& v : z) v = std::uniform_real_distribution<float>(-2, 2)(rng);
    const LtGemm dg = plan_linear_dgrad(N, in, outf, sg, sw);
    REQUIRE(dg.ok);
    CHECK(dg.plan.ldc == in);
    const std::vector<float> gz =
        lt_reference(dg.plan, g.buf.data(), w.buf.data(), LtEpilogue::dgelu, nullptr, &z, in, nullptr);
    for (int64_t r = 0; r < N; ++r)
      for (int64_t i = 0; i < in; ++i) {
        float s = 0;
        for (int64_t o = 0; o < outf; ++o) s += g.at(r, o) * w.at(o, i);
        CHECK(gz[r * in + i] == doctest::Approx(s * gelu_tanh_grad(z[r * in + i])).epsilon(1e-4));
      }

    // wgrad with BGRADB: gW (out, in) = g^T x, gb (out) = the sums of g's rows.
    const LtGemm wg = plan_linear_wgrad(N, in, outf, sg, sx);
    REQUIRE(wg.ok);
    CHECK(wg.plan.n == outf);
    CHECK(wg.plan.k == N);
    std::vector<float> gb;
    const std::vector<float> gw =
        lt_reference(wg.plan, g.buf.data(), x.buf.data(), LtEpilogue::bgradb, nullptr, nullptr, 0, &gb);
    for (int64_t o = 0; o < outf; ++o) {
      float sb = 0;
      for (int64_t r = 0; r < N; ++r) sb += g.at(r, o);
      CHECK(gb[o] == doctest::Approx(sb).epsilon(1e-5));
      for (int64_t i = 0; i < in; ++i) {
        float s = 0;
        for (int64_t r = 0; r < N; ++r) s += g.at(r, o) * x.at(r, i);
        CHECK(gw[o * in + i] == doctest::Approx(s).epsilon(1e-5));
      }
    }
    ++cases;
  }
  CHECK(cases == 40);
}

TEST_CASE("lt plan: operands neither row- nor column-major are refused") {
  const int64_t bad[2] = {5, 2}, ok[2] = {4, 1};
  CHECK_FALSE(plan_linear_forward(3, 4, 8, bad, ok).ok);
  CHECK_FALSE(plan_linear_wgrad(3, 4, 8, ok, bad).ok);
  CHECK(plan_linear_forward(3, 4, 8, ok, ok).ok);
}

TEST_CASE("lt plan: algorithm keys tell apart what an algorithm depends on") {
  LtKey a;
  a.m = 768, a.n = 8192, a.k = 3072, a.lda = 3072, a.ldb = 3072, a.ldc = 768, a.dtype = snug::DType::bf16;
  a.align_a = a.align_b = a.align_c = 16;
  std::unordered_set<LtKey, LtKeyHash> keys{a};
  auto differs = [&](auto change) {
    LtKey b = a;
    change(b);
    CHECK_FALSE(b == a);
    keys.insert(b);
  };
  differs([](LtKey& k) { k.epilogue = LtEpilogue::bgradb; });
  differs([](LtKey& k) { k.dtype = snug::DType::f16; });
  differs([](LtKey& k) { k.tf32 = true; });
  differs([](LtKey& k) { k.trans_a = true; });
  differs([](LtKey& k) { k.n = 4096; });
  differs([](LtKey& k) { k.align_bias = 8; });
  differs([](LtKey& k) { k.align_aux = 2; });
  differs([](LtKey& k) { k.device = 1; });
  CHECK(keys.size() == 9);
  LtKey same = a;
  CHECK(LtKeyHash{}(same) == LtKeyHash{}(a));

  alignas(16) static char buf[64];
  CHECK(lt_alignment(nullptr) == 0);
  CHECK(lt_alignment(buf) == 16);
  CHECK(lt_alignment(buf + 8) == 8);
  CHECK(lt_alignment(buf + 2) == 2);
  CHECK(lt_alignment(buf + 3) == 1);
}
