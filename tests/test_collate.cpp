// SPDX-License-Identifier: MIT
// Collate: stack checks shapes; pad_collate pads to the longest, with lengths
// and a mask that is true exactly at real positions.
#include <doctest/doctest.h>

#include <snug/data/collate.h>

using namespace snug;
using namespace snug::data;

TEST_CASE("stack_collate stacks each field") {
  std::vector<Sample> s;
  for (int i = 0; i < 3; ++i)
    s.push_back({from_vector<float>({float(i), float(10 * i)}), scalar_tensor(i, DType::i64)});
  Batch b = stack_collate(s);
  REQUIRE(b.fields.size() == 2);
  CHECK(b[0].shape() == Shape{3, 2});
  CHECK(b[0].to_vector<float>() == std::vector<float>{0, 0, 1, 10, 2, 20});
  CHECK(b[1].to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK_FALSE(b.padding_mask.defined());
  // A strided (non-contiguous) field goes through the general copy.
  Tensor m = from_vector<float>({1, 2, 3, 4}, {2, 2});
  Batch t = stack_collate({{m.t()}, {m}});
  CHECK(t[0].to_vector<float>() == std::vector<float>{1, 3, 2, 4, 1, 2, 3, 4});
  s[1][0] = from_vector<float>({1, 2, 3});
  CHECK_THROWS_WITH_AS(stack_collate(s), doctest::Contains("field 0 of sample 1 has shape [3]"), ShapeError);
  s[1][0] = from_vector<double>({1, 2});
  CHECK_THROWS_AS(stack_collate(s), DTypeError);
  CHECK_THROWS_AS(stack_collate({}), ValueError);
}

TEST_CASE("pad_collate: padded values, lengths and mask") {
  // Three sequences of lengths 3, 1, 4 with a label each, and a (L, 2) feature field.
  std::vector<std::vector<int64_t>> seqs = {{5, 6, 7}, {8}, {1, 2, 3, 4}};
  std::vector<Sample> s;
  for (size_t k = 0; k < seqs.size(); ++k) {
    const auto L = int64_t(seqs[k].size());
    s.push_back({from_vector(seqs[k]), scalar_tensor(double(k), DType::i64), ones({L, 2})});
  }
  Batch b = pad_collate({.pad_values = {-1, 0, 0}})(s);
  REQUIRE(b.fields.size() == 3);
  CHECK(b[0].shape() == Shape{3, 4});
  CHECK(b[0].to_vector<int64_t>() == std::vector<int64_t>{5, 6, 7, -1, 8, -1, -1, -1, 1, 2, 3, 4});
  CHECK(b[1].to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  CHECK(b[2].shape() == Shape{3, 4, 2});
  CHECK(b.lengths.to_vector<int64_t>() == std::vector<int64_t>{3, 1, 4});
  REQUIRE(b.padding_mask.dtype() == DType::b8);
  CHECK(b.padding_mask.shape() == Shape{3, 4});
  // The padding mask is true exactly where the padded field holds no real
  // token (the attention masks' convention: true = masked out).
  std::vector<int64_t> m = b.padding_mask.to_vector<int64_t>();
  std::vector<int64_t> tok = b[0].to_vector<int64_t>();
  std::vector<float> feat = b[2].to_vector<float>();
  for (size_t i = 0; i < m.size(); ++i) {
    CHECK(m[i] == (tok[i] == -1 ? 1 : 0));
    CHECK(feat[2 * i] == (m[i] ? 0.0f : 1.0f));
  }
  // pad_to_multiple_of rounds L up; the mask covers the extra columns as padding.
  Batch r = pad_collate({.pad_to_multiple_of = 8})(s);
  CHECK(r[0].shape() == Shape{3, 8});
  CHECK(r.padding_mask.to_vector<int64_t>()[7] == 1);
  CHECK(r.padding_mask.sum().item() == 3 * 8 - 8);
  // Trailing dims must agree.
  s[1][2] = ones({1, 3});
  CHECK_THROWS_WITH_AS(pad_collate()(s), doctest::Contains("only dim 0 may differ"), ShapeError);
}

TEST_CASE("Batch::to moves every field, the lengths and the mask; indices stay") {
  std::vector<Sample> s = {{from_vector<int64_t>({1, 2, 3}), scalar_tensor(0, DType::i64)},
                           {from_vector<int64_t>({4}), scalar_tensor(1, DType::i64)}};
  Batch b = pad_collate({.pad_values = {0, 0}})(s);
  b.indices = {7, 9};
  const Device d("cpu:1");  // a virtual CPU device: its own pool, the CPU's kernels
  const Batch m = b.to(d);
  REQUIRE(m.fields.size() == 2);
  for (const Tensor& t : {m[0], m[1], m.lengths, m.padding_mask}) CHECK(t.device() == d);
  CHECK(m[0].to_vector<int64_t>() == b[0].to_vector<int64_t>());
  CHECK(m.padding_mask.to_vector<int64_t>() == b.padding_mask.to_vector<int64_t>());
  CHECK(m.indices == b.indices);
  CHECK(b[0].device() == kCPU);  // the original stays
  // A stacked batch has no lengths or mask: they stay undefined.
  const Batch st = stack_collate({{ones({2})}, {zeros({2})}}).to(d);
  CHECK(st[0].device() == d);
  CHECK_FALSE(st.lengths.defined());
  CHECK_FALSE(st.padding_mask.defined());
}
