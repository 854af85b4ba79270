// SPDX-License-Identifier: MIT
// cuda/sdpa_plan.h on the CPU: the keys attention graphs are cached by, the
// cache, and which path a call takes (NOTE [ Attention through cuDNN ] in
// cuda/attention_cudnn.cpp). No GPU needed: this is the host side only.
#include <doctest/doctest.h>

#include <memory>
#include <unordered_set>

#include <snug/cuda/sdpa_plan.h>

using namespace snug;
using namespace snug::cuda;

namespace {
SdpaKey key(int64_t B, int64_t T, int64_t H, int64_t D, DType dt, bool causal, bool backward = false) {
  SdpaKey k;
  k.B = B, k.T = T, k.H = H, k.D = D, k.dtype = dt, k.causal = causal, k.backward = backward, k.scale = 0.125;
  return k;
}
const SdpaCaps kH100{true, 90, 91900};
}  // namespace

TEST_CASE("sdpa plan: a key differs in everything a graph is built for") {
  const SdpaKey base = key(8, 1024, 12, 64, DType::bf16, true);
  std::unordered_set<SdpaKey, SdpaKeyHash> seen{base};
  SdpaKey k = base;
  CHECK(seen.count(k) == 1);  // equal keys, equal hashes
  auto differs = [&](SdpaKey other) {
    CHECK_FALSE(other == base);
    seen.insert(other);
  };
  k = base, k.B = 4, differs(k);
  k = base, k.T = 512, differs(k);
  k = base, k.H = 6, k.D = 128, differs(k);
  k = base, k.dtype = DType::f16, differs(k);
  k = base, k.causal = false, differs(k);
  k = base, k.backward = true, differs(k);
  k = base, k.scale = 0.1, differs(k);
  k = base, k.device = 1, differs(k);
  k = base, k.padded = true, differs(k);
  CHECK(seen.size() == 10);  // and none hashed into another's place
}

TEST_CASE("sdpa plan: cuDNN serves bf16/f16, head sizes 8k <= 128, sm 80+, suffix padding; else the kernels, and why") {
  constexpr SdpaPadding none = SdpaPadding::none;
  CHECK(choose_sdpa(key(8, 1024, 12, 64, DType::bf16, true), none, false, kH100).path == SdpaPath::cudnn);
  CHECK(choose_sdpa(key(8, 1024, 12, 64, DType::f16, false), none, false, kH100).path == SdpaPath::cudnn);
  CHECK(choose_sdpa(key(2, 77, 6, 128, DType::bf16, true), none, false, SdpaCaps{true, 80, 90000}).path ==
        SdpaPath::cudnn);
  CHECK(choose_sdpa(key(8, 512, 12, 64, DType::bf16, false), SdpaPadding::suffix, false, kH100).path ==
        SdpaPath::cudnn);
  CHECK(choose_sdpa(key(8, 512, 12, 64, DType::bf16, true), SdpaPadding::suffix, false, kH100).path ==
        SdpaPath::cudnn);
  struct Refused {
    SdpaKey k;
    SdpaPadding padding;
    bool mask;
    SdpaCaps caps;
    const char* why;
  };
  for (const Refused& r : {
           Refused{key(8, 1024, 12, 64, DType::f32, true), none, false, kH100, "not bf16 or f16"},
           Refused{key(8, 1024, 12, 60, DType::bf16, true), none, false, kH100, "head size"},
           Refused{key(8, 1024, 4, 256, DType::bf16, true), none, false, kH100, "head size"},
           Refused{key(8, 1024, 12, 64, DType::bf16, true), none, false, SdpaCaps{true, 75, 91900}, "sm 80"},
           Refused{key(8, 1024, 12, 64, DType::bf16, true), none, false, SdpaCaps{true, 90, 8907}, "cuDNN older"},
           Refused{key(8, 1024, 12, 64, DType::bf16, true), none, false, SdpaCaps{false, 90, 91900}, "frontend"},
           Refused{key(8, 1024, 12, 64, DType::bf16, false), SdpaPadding::other, false, kH100, "key padding"},
           Refused{key(8, 1024, 12, 64, DType::bf16, false), none, true, kH100, "general mask"},
       }) {
    const SdpaChoice c = choose_sdpa(r.k, r.padding, r.mask, r.caps);
    CAPTURE(r.why);
    CHECK(c.path == SdpaPath::kernels);
    CHECK(std::string(c.why).find(r.why) != std::string::npos);
  }
}

TEST_CASE("sdpa plan: a key padding mask is cuDNN's when each row is valid keys, then padding, at least one valid") {
  auto classify = [](std::vector<std::vector<int>> rows, std::vector<int32_t>* lens) {
    const int64_t B = int64_t(rows.size()), T = int64_t(rows[0].size());
    std::vector<char> flat;
    for (const auto& r : rows)
      for (int v : r) flat.push_back(v != 0);
    static_assert(sizeof(bool) == sizeof(char));
    return classify_key_padding(reinterpret_cast<const bool*>(flat.data()), B, T, lens);
  };
  std::vector<int32_t> lens;
  CHECK(classify({{0, 0, 0, 1}, {0, 1, 1, 1}, {0, 0, 0, 0}}, &lens) == SdpaPadding::suffix);
  CHECK(lens == std::vector<int32_t>{3, 1, 4});
  CHECK(classify({{0, 0, 1, 0}}, &lens) == SdpaPadding::other);        // padding inside the row
  CHECK(classify({{1, 0, 0, 0}}, &lens) == SdpaPadding::other);        // left padding
  CHECK(classify({{0, 0}, {1, 1}}, &lens) == SdpaPadding::other);      // a row with no key
}

TEST_CASE("sdpa plan: the cache builds a graph once per key, and remembers a refusal") {
  SdpaGraphCache<int> cache;
  int built = 0;
  auto make = [&] {
    ++built;
    return std::make_shared<int>(built);
  };
  const SdpaKey a = key(8, 1024, 12, 64, DType::bf16, true), b = key(8, 512, 12, 64, DType::bf16, true);
  const auto ga = cache.get(a, make);
  CHECK(cache.get(a, make) == ga);  // the same graph, not rebuilt
  CHECK(cache.get(b, make) != ga);
  CHECK(built == 2);
  CHECK(cache.hits() == 1);
  CHECK(cache.misses() == 2);
  // A shape cuDNN refused (make returned nullptr) is not asked again.
  const SdpaKey c = key(1, 7, 1, 64, DType::f16, false);
  int refusals = 0;
  auto refuse = [&]() -> std::shared_ptr<int> {
    ++refusals;
    return nullptr;
  };
  CHECK(cache.get(c, refuse) == nullptr);
  CHECK(cache.get(c, refuse) == nullptr);
  CHECK(refusals == 1);
  CHECK(cache.size() == 3);
}
