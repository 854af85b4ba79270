// SPDX-License-Identifier: MIT
// The README's tour, compiled and run, so the README stays true.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <iostream>
#include <sstream>

#include <snug/snug.h>

using namespace snug;

TEST_CASE("the README tour runs") {
  std::ostringstream out;
  std::streambuf* old = std::cout.rdbuf(out.rdbuf());
  // ---- copied from README.md, "A short tour" ----
  Tensor a = arange(6, kFloat32).view({2, 3});      // [[0,1,2],[3,4,5]]
  Tensor b = a.t();                                 // a (3, 2) view, no copy
  Tensor c = a + ones({3});                         // NumPy broadcasting
  Tensor h = randn({4, 3}, kFloat16).to(kFloat32);  // f16/bf16 storage, f32 math

  Tensor w = randn({3, 2});
  w.requires_grad_();
  Tensor loss = relu(matmul(a, w)).pow(2.0).mean();
  loss.backward();
  std::cout << w.grad() << "\n";
  {
    NoGradGuard no_grad;
    w.sub_(w.grad() * 0.1);
  }
  auto grads = autograd::grad({(w * w).sum()}, {w});

  std::cout << memory::allocated(kCPU) << " bytes live, peak " << memory::peak_allocated(kCPU) << "\n";
  std::cout << memory::summary(kCPU);
  memory::set_capacity(Device("cpu:1"), 64 << 20);

  std::string path = std::string("/tmp/snug_readme_") + std::to_string(::getpid()) + ".safetensors";
  save_safetensors(path, {{"w", w}});

  auto model = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 16), std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(16, 1)});
  nn::optim::AdamW opt(model->parameters(), {1e-3});
  // ---- end of the tour ----
  std::cout.rdbuf(old);
  CHECK(b.shape() == Shape{3, 2});
  CHECK(c.to_vector<float>() == std::vector<float>{1, 2, 3, 4, 5, 6});
  CHECK(h.dtype() == kFloat32);
  CHECK(grads[0].shape() == Shape{3, 2});
  CHECK(load_safetensors(path).tensors.size() == 1);
  CHECK(model->num_parameters() == 3 * 16 + 16 + 16 + 1);
  CHECK(out.str().find("bytes live") != std::string::npos);
  std::remove(path.c_str());
}
