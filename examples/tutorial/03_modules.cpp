// SPDX-License-Identifier: MIT
// Tutorial chapter 3 (docs/tutorial/03-modules-and-training.md): a module of
// our own, a Sequential inside it, AdamW, the training loop, and saving and
// loading the weights. The task: is a point of the plane inside a circle?
// Exits 1 if a check fails.
#include <snug/snug.h>

#include <cstdio>
#include <iostream>

using namespace snug;

// A module owns parameters and children; registering them is what lets
// parameters(), state_dict(), to(device) and zero_grad() find them.
class CircleNet : public nn::Module {
 public:
  explicit CircleNet(int64_t hidden) : Module("CircleNet") {
    // The bound form (name, member, module): forward calls the typed member.
    register_module("body", body,
                    std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::Module>>{
                        std::make_shared<nn::Linear>(2, hidden), std::make_shared<nn::ReLU>(),
                        std::make_shared<nn::Linear>(hidden, hidden), std::make_shared<nn::ReLU>()}));
    register_module("head", head, std::make_shared<nn::Linear>(hidden, 2));
  }
  // x (N, 2) -> logits (N, 2)
  Tensor forward(const Tensor& x) override { return head->forward(body->forward(x)); }

  std::shared_ptr<nn::Sequential> body;
  std::shared_ptr<nn::Linear> head;
};

// n points in [-2, 2)^2, labelled 1 inside the circle of radius 1.2.
std::pair<Tensor, Tensor> make_points(int64_t n) {
  Tensor x = rand({n, 2}) * 4.0 - 2.0;      // (n, 2)
  Tensor inside = (x * x).sum({1}) < 1.44;  // (n) bool
  return {x, inside.to(kInt64)};            // cross_entropy wants i64 classes
}

double accuracy(nn::Module& model, const Tensor& x, const Tensor& y) {
  NoGradGuard no_grad;  // evaluation records no graph
  Tensor hits = (model.forward(x).argmax(1) == y).to(kFloat32);
  return hits.mean().item();
}

int main() {
  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::cout << (ok ? "ok:   " : "FAIL: ") << what << "\n";
    failures += ok ? 0 : 1;
  };
  manual_seed(0);  // parameters are initialised from the default generator
  auto model = std::make_shared<CircleNet>(32);
  std::cout << model->pretty() << "\n" << model->num_parameters() << " parameters:\n";
  for (const auto& [name, p] : model->named_parameters())
    std::cout << "  " << name << " " << shape_str(p.shape()) << "\n";

  auto [x_train, y_train] = make_points(1024);
  auto [x_test, y_test] = make_points(512);

  // ---- the training loop: forward, loss, zero_grad, backward, step ----
  nn::optim::AdamW opt(model->parameters(), {.lr = 1e-2, .weight_decay = 1e-4});
  model->train();
  double first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    Tensor logits = model->forward(x_train);  // (1024, 2)
    Tensor loss = nn::functional::cross_entropy(logits, y_train);
    opt.zero_grad();  // gradients add up otherwise
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
    if (step % 50 == 0) std::cout << "step " << step << " loss " << loss.item() << "\n";
  }
  model->eval();
  const double acc = accuracy(*model, x_test, y_test);
  std::cout << "final loss " << last << ", test accuracy " << acc << "\n";
  expect(last < first / 4, "the loss fell to under a quarter");
  expect(acc > 0.9, "the test accuracy is above 90%");

  // ---- saving and loading: the state_dict is named tensors ----
  const std::string path = "tutorial_03_circle.safetensors";
  save_safetensors(path, model->state_dict());
  manual_seed(123);
  auto fresh = std::make_shared<CircleNet>(32);  // other random weights
  expect(accuracy(*fresh, x_test, y_test) != acc, "a fresh model predicts differently");
  fresh->load_state_dict(load_safetensors(path).tensors);  // strict: names and shapes must match
  fresh->eval();
  expect(accuracy(*fresh, x_test, y_test) == acc, "the loaded model predicts exactly as the saved one");

  // A state_dict with a wrong shape is refused with the key named, and nothing is changed.
  try {
    auto other = std::make_shared<CircleNet>(16);
    other->load_state_dict(load_safetensors(path).tensors);
    expect(false, "loading into a smaller model is an error");
  } catch (const Error& e) {
    std::cout << "load into CircleNet(16): " << std::string(e.what()).substr(0, 120) << "...\n";
    expect(true, "loading into a smaller model is an error");
  }
  std::remove(path.c_str());

  std::cout << (failures == 0 ? "PASS" : "FAILED") << "\n";
  return failures == 0 ? 0 : 1;
}
