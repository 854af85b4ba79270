// SPDX-License-Identifier: MIT
// snug-bench gpt_dump --ckpt PATH --out OUT.safetensors [--batch B] [--seed S]
// Loads a GPT checkpoint written by examples/charlm (--save), runs one
// forward and backward on a seeded batch and writes the batch, logits, loss
// and every parameter's gradient to OUT, for tools/parity.py to compare
// against PyTorch.
#include <cstdio>

#include <snug/core/generator.h>
#include <snug/core/safetensors.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/training_state.h>
#include "bench/bench.h"

using namespace snug;

SNUG_BENCH(gpt_dump, "run a charlm GPT checkpoint on a seeded batch and dump logits, loss, grads (--ckpt --out)",
           bench::text_flag("ckpt", "", "a checkpoint written by charlm --save (required)", "PATH"),
           bench::text_flag("out", "", "the safetensors file to write (required)", "PATH"),
           bench::int_flag("batch", 4, "batch size"), bench::int_flag("seed", 7, "seed of the batch", 0)) {
  const std::string ck = args.get("ckpt"), out = args.get("out");
  SNUG_FLAG_CHECK(!ck.empty() && !out.empty(), "--ckpt PATH and --out OUT.safetensors are both needed");
  SafetensorsFile f = load_safetensors(ck);
  auto md = [&](const char* k) -> int64_t {
    auto it = f.metadata.find(k);
    SNUG_CHECK(it != f.metadata.end(), IOError, ck, ": metadata has no \"", k, "\" (was it written by charlm --save?)");
    return std::stoll(it->second);
  };
  nn::models::GPTConfig cfg{md("gpt.vocab"), md("gpt.block"), md("gpt.layers"), md("gpt.heads"), md("gpt.embd"), 0.0};
  nn::models::GPT model(cfg);
  nn::load_training_state(ck, nn::TrainingStateParts{&model, nullptr, nullptr, {}});
  const int64_t B = args.get_int("batch");
  Generator gen(static_cast<uint64_t>(args.get_int("seed")));
  Tensor x = randint(0, cfg.vocab, {B, cfg.block}, DType::i64, &gen);
  Tensor y = randint(0, cfg.vocab, {B, cfg.block}, DType::i64, &gen);
  Tensor logits = model.forward(x);
  Tensor loss = nn::functional::cross_entropy(logits.view({-1, cfg.vocab}), y.reshape({-1}));
  loss.backward();
  TensorMap dump = {{"x", x}, {"y", y}, {"logits", logits.detach()}, {"loss", loss.detach()}};
  for (auto& [n, p] : model.named_parameters()) dump.emplace_back("grad." + n, p.grad());
  save_safetensors(out, dump);
  std::printf("{\"out\": \"%s\", \"loss\": %.6f}\n", out.c_str(), loss.item());
  return 0;
}
