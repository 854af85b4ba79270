// SPDX-License-Identifier: MIT
// TensorDataset and transforms, including a random transform that is
// reproducible per (seed, epoch, index).
#include <doctest/doctest.h>

#include <snug/data/dataset.h>

using namespace snug;
using namespace snug::data;

TEST_CASE("TensorDataset gives views of row i of every tensor") {
  Tensor x = arange(12, DType::f32).reshape({4, 3});
  Tensor y = from_vector<int64_t>({7, 8, 9, 10});
  TensorDataset ds({x, y});
  CHECK(ds.size() == 4);
  Sample s = ds.get(2);
  REQUIRE(s.size() == 2);
  CHECK(s[0].to_vector<float>() == std::vector<float>{6, 7, 8});
  CHECK(s[1].dim() == 0);
  CHECK(s[1].item<int64_t>() == 9);
  CHECK(s[0].storage() == x.storage());  // no copy
  CHECK_THROWS_AS(ds.get(4), IndexError);
  CHECK_THROWS_AS(ds.get(-1), IndexError);
  CHECK_THROWS_WITH_AS(TensorDataset({x, from_vector<int64_t>({1, 2})}), doctest::Contains("tensor 1 has 2 samples"),
                       ShapeError);
}

TEST_CASE("transforms compose left to right") {
  Tensor img = from_vector<uint8_t>({0, 51, 255}, {1, 1, 3});
  auto ds = std::make_shared<TensorDataset>(std::vector<Tensor>{img});
  TransformDataset t(ds, compose({to_dtype(DType::f32), scale(1.0 / 255), normalize(0.5, 0.5)}));
  Sample s = t.get(0);
  CHECK(s[0].dtype() == DType::f32);
  std::vector<float> v = s[0].to_vector<float>();
  CHECK(v[0] == doctest::Approx(-1.0));
  CHECK(v[1] == doctest::Approx(-0.6));
  CHECK(v[2] == doctest::Approx(1.0));
  CHECK_THROWS_AS(TransformDataset(ds, normalize(0, 1)).get(0), DTypeError);  // u8 needs to_dtype first
  CHECK_THROWS_AS(TransformDataset(ds, to_dtype(DType::f32, 3)).get(0), IndexError);
}

TEST_CASE("random_flip draws from the per-sample generator") {
  Tensor img = arange(4, DType::f32).reshape({1, 1, 4});
  auto ds = std::make_shared<TensorDataset>(std::vector<Tensor>{img.expand({64, 1, 4}).contiguous()});
  TransformDataset t(ds, random_flip(-1, 0.5));
  int flipped = 0;
  std::vector<bool> first;
  for (int64_t i = 0; i < 64; ++i) {
    seed_sample_rng(1, 0, i);
    std::vector<float> v = t.get(i)[0].to_vector<float>();
    const bool f = v[0] == 3.0f;
    CHECK((f ? v == std::vector<float>{3, 2, 1, 0} : v == std::vector<float>{0, 1, 2, 3}));
    flipped += f;
    first.push_back(f);
  }
  CHECK(flipped > 16);
  CHECK(flipped < 48);
  // Same (seed, epoch, index): same decision.
  for (int64_t i = 0; i < 64; ++i) {
    seed_sample_rng(1, 0, i);
    CHECK((t.get(i)[0].to_vector<float>()[0] == 3.0f) == first[size_t(i)]);
  }
  CHECK(mix_seed(1, 0, 1) != mix_seed(1, 1, 0));
}
