// SPDX-License-Identifier: MIT
// core/cpu_isa: the CPU levels of one libsnug (NOTE [ CPU levels ] in
// core/cpu/level.h). Every level this CPU runs computes the same results as
// the baseline (the same values within rounding; conversions and int8 sums
// exactly); a level that is not built or that the CPU lacks is a clear error.
#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <vector>

#include <snug/autograd/ops.h>
#include <snug/core/cpu_isa.h>
#include <snug/core/raw_int8.h>
#include <snug/nn/functional.h>
#include "test_util.h"

using namespace snug;
using snug::testing::contains;
using snug::testing::error_of;
using snug::testing::rnd;
namespace F = snug::nn::functional;

namespace {

// Restores the level a test switches away from.
struct IsaGuard {
  std::string saved = cpu_isa();
  ~IsaGuard() { set_cpu_isa(saved); }
};

bool has(const std::vector<std::string>& v, const std::string& x) { return std::find(v.begin(), v.end(), x) != v.end(); }

// Results of a training-shaped pass that touches every kernel family a level
// compiles: GEMMs with bias and activation epilogues (linear), layer norm,
// softmax / cross entropy, causal attention, conv + pool, reductions, exp,
// the 16-bit conversions and the int8 GEMM; and the gradients of the inputs.
struct Results {
  std::vector<Tensor> values;  // compared within rounding
  std::vector<Tensor> exact;   // compared bit for bit
};

Results pass() {
  Results r;
  Tensor x = rnd({6, 40, 64}, 1, kFloat32).requires_grad_();
  Tensor w1 = (rnd({96, 64}, 2, kFloat32) * 0.1).detach().requires_grad_();
  Tensor b1 = rnd({96}, 3, kFloat32).requires_grad_();
  Tensor ln_w = rnd({96}, 4, kFloat32).requires_grad_(), ln_b = rnd({96}, 5, kFloat32).requires_grad_();
  Tensor h = gelu(F::linear(x, w1, b1), GeluApprox::tanh);             // (6, 40, 96)
  h = F::layer_norm(h, ln_w, ln_b);                                     // (6, 40, 96)
  Tensor a = F::causal_self_attention(h, /*heads=*/4);                  // qkv (6, 40, 96) -> (6, 40, 32)
  Tensor logits = F::linear(a, rnd({11, 32}, 6, kFloat32));             // (6, 40, 11)
  Tensor target = randint(0, 11, {240}, DType::i64);
  Tensor loss = F::cross_entropy(logits.reshape({240, 11}), target);
  Tensor img = rnd({2, 3, 17, 17}, 7, kFloat32).requires_grad_();
  Tensor cw = rnd({8, 3, 3, 3}, 8, kFloat32).requires_grad_();
  Tensor c = F::max_pool2d(relu(F::conv2d(img, cw)), {2, 2});           // (2, 8, 7, 7)
  // Rows whose width is no multiple of any vector (the masked tails).
  Tensor odd = rnd({7, 37}, 10, kFloat32).requires_grad_();
  Tensor odd_w = rnd({37}, 11, kFloat32).requires_grad_(), odd_b = rnd({37}, 12, kFloat32).requires_grad_();
  Tensor odd_y = F::layer_norm(odd, odd_w, odd_b);
  Tensor odd_p = matmul(odd_y, rnd({37, 19}, 13, kFloat32));  // (7, 19)
  Tensor total = add(add(loss, mean(exp(c * 0.1))), mean(square(odd_p)));
  total.backward();
  r.values = {h.detach(), a.detach(), logits.detach(), c.detach(), total.detach(), x.grad(), w1.grad(),
              b1.grad(), ln_w.grad(), img.grad(), cw.grad(), softmax(logits.detach(), -1), odd_y.detach(),
              odd.grad(), odd_w.grad(), odd_b.grad()};
  // 16-bit conversions round to nearest even: the same bits at every level.
  Tensor wide = rnd({1000}, 9, kFloat32) * 300.0;
  r.exact = {wide.to(DType::f16), wide.to(DType::bf16), wide.to(DType::f16).to(kFloat32),
             wide.to(DType::bf16).to(kFloat32)};
  // The int8 GEMM's i32 sums are exact on every kernel.
  Tensor qa = randint(0, 256, {37, 300}, DType::i64).to(DType::u8);
  Tensor qw = randint(-128, 128, {29, 300}, DType::i64).to(DType::i8);
  r.exact.push_back(raw::gemm_u8s8s32(qa, raw::pack_int8_weight(qw)));
  return r;
}

}  // namespace

TEST_CASE("cpu_isa: the level in use is built and runs on this CPU") {
  const auto built = cpu_isas_built(), runs = cpu_isas_supported();
  REQUIRE(!built.empty());
  CHECK(has(runs, cpu_isa()));
  for (const auto& l : runs) CHECK(has(built, l));
  MESSAGE("level ", cpu_isa(), "; built: ", built.size(), ", this CPU runs: ", runs.size());
  if (!has(built, "native")) {  // the dispatching build carries a level that every CPU of its kind runs
#if defined(__aarch64__)
    const std::string floor = "neon";  // NEON is part of armv8-a
#else
    const std::string floor = "baseline";
#endif
    CHECK(has(built, floor));
    CHECK(has(runs, floor));
  }
}

TEST_CASE("cpu_isa: a level that is not built, or that the CPU lacks, is a clear error") {
  IsaGuard g;
  const std::string e = error_of<ValueError>([] { set_cpu_isa("avx1024"); });
  CHECK(contains(e, "no CPU level 'avx1024'"));
  CHECK(contains(e, cpu_isas_built().front()));  // names what the build has
  CHECK(cpu_isa() == g.saved);                    // a refused switch changes nothing
  for (const auto& l : cpu_isas_built())
    if (!has(cpu_isas_supported(), l)) {
      const std::string d = error_of<DeviceError>([&] { set_cpu_isa(l); });
      CHECK(contains(d, "needs instructions this CPU lacks"));
    }
}

TEST_CASE("cpu_isa: every level this CPU runs computes what the baseline computes") {
  IsaGuard g;
  const auto levels = cpu_isas_supported();
  const std::string ref_level = levels.back();  // the lowest: baseline
  set_cpu_isa(ref_level);
  manual_seed(5);
  const Results ref = pass();
  for (const auto& l : levels) {
    CAPTURE(l);
    set_cpu_isa(l);
    CHECK(cpu_isa() == l);
    manual_seed(5);
    const Results got = pass();
    REQUIRE(got.values.size() == ref.values.size());
    for (size_t i = 0; i < ref.values.size(); ++i) {
      CAPTURE(i);
      const double scale = std::max(1.0, testing::max_abs(ref.values[i]));
      CHECK(testing::max_abs_diff(got.values[i], ref.values[i]) <= 2e-4 * scale);
    }
    for (size_t i = 0; i < ref.exact.size(); ++i) {
      CAPTURE(i);
      CHECK(testing::max_abs_diff(got.exact[i].to(kFloat64), ref.exact[i].to(kFloat64)) == 0.0);
    }
  }
}

TEST_CASE("cpu_isa: an int8 weight packed at one level is refused by a level with another layout") {
  IsaGuard g;
  const auto levels = cpu_isas_supported();
  set_cpu_isa(levels.front());
  const bool vnni_first = std::string(raw::int8_gemm_kernel()) == "avx512_vnni";
  Tensor qw = randint(-128, 128, {16, 64}, DType::i64).to(DType::i8);
  Tensor qa = randint(0, 256, {4, 64}, DType::i64).to(DType::u8);
  const raw::PackedInt8Weight packed = raw::pack_int8_weight(qw);
  set_cpu_isa(levels.back());
  const bool vnni_last = std::string(raw::int8_gemm_kernel()) == "avx512_vnni";
  if (vnni_first == vnni_last) {
    CHECK(raw::gemm_u8s8s32(qa, packed).to_vector<int64_t>() ==
          raw::gemm_u8s8s32(qa, raw::pack_int8_weight(qw)).to_vector<int64_t>());
  } else {
    const std::string e = error_of<DeviceError>([&] { raw::gemm_u8s8s32(qa, packed); });
    CHECK(contains(e, "pack"));
  }
}
