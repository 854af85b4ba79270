// SPDX-License-Identifier: MIT
// Training checkpoints: a resumed run equals an uninterrupted one bit for bit;
// strict loading; corrupt, truncated and foreign files; failed saves leave the
// previous checkpoint intact.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <unistd.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <snug/autograd/grad_mode.h>
#include <snug/autograd/ops.h>
#include <snug/core/generator.h>
#include <snug/core/safetensors.h>
#include <snug/nn/models/gpt.h>
#include <snug/nn/optim/optimizer.h>
#include <snug/nn/training_state.h>
#include "test_util.h"

using namespace snug;
using snug::testing::error_of;
using namespace snug::nn;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() / ("snug_test_checkpoint_" + std::to_string(::getpid()));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

models::GPTConfig tiny_cfg() {
  models::GPTConfig c;
  c.vocab = 11;
  c.block = 8;
  c.layers = 1;
  c.heads = 2;
  c.embd = 16;
  c.dropout = 0.1;  // so the default generator's state matters too
  return c;
}

// Everything a training run owns. Built from seeds so a "fresh process" can
// be imitated by building with different ones and then loading.
struct Run {
  std::unique_ptr<models::GPT> model;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::WarmupCosine> sched;
  Generator data{0};
  std::vector<double> losses;
  static constexpr int64_t kSteps = 8, B = 3, T = 8;

  Run(uint64_t model_seed, uint64_t data_seed) {
    manual_seed(model_seed);
    model = std::make_unique<models::GPT>(tiny_cfg());
    opt = std::make_unique<optim::AdamW>(model->parameters(), optim::AdamWOptions{.lr = 1e-2, .weight_decay = 0.01});
    sched = std::make_unique<optim::WarmupCosine>(*opt, 3, kSteps, 0.1);
    data.manual_seed(data_seed);
  }
  TrainingStateParts parts() {
    return {model.get(), opt.get(), sched.get(), {{"default", &default_generator()}, {"data", &data}}};
  }
  void step() {
    Tensor batch = randint(0, 11, {B, T + 1}, TensorOptions(kInt64), &data);
    Tensor x = batch.slice(1, 0, T), y = batch.slice(1, 1, T + 1);
    opt->zero_grad();
    Tensor loss = model->loss(x, y);
    loss.backward();
    opt->step();
    sched->step();
    losses.push_back(loss.item());
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  Tensor ac = a.contiguous(), bc = b.contiguous();
  return ac.shape() == bc.shape() && ac.dtype() == bc.dtype() &&
         std::memcmp(ac.data_ptr(), bc.data_ptr(), ac.nbytes()) == 0;
}
void check_same_params(Module& a, Module& b) {
  auto pa = a.state_dict(), pb = b.state_dict();
  REQUIRE(pa.size() == pb.size());
  for (size_t i = 0; i < pa.size(); ++i) {
    INFO(pa[i].first);
    CHECK(pa[i].first == pb[i].first);
    CHECK(same_bytes(pa[i].second, pb[i].second));
  }
}
std::string read_bytes(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void write_bytes(const std::string& p, const std::string& s) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << s;
}

}  // namespace

TEST_CASE("resume: save at step k, load into fresh objects, continue == uninterrupted (bitwise)") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  const int k = 3;
  Run a(1337, 42);
  for (int s = 0; s < Run::kSteps; ++s) a.step();

  Run b(1337, 42);
  for (int s = 0; s < k; ++s) b.step();
  save_training_state(path, b.parts(), k, {{"note", "hello"}});
  const double lr_at_k = b.opt->lr();

  // A fresh "process": different seeds everywhere, then load.
  Run c(7, 8);
  manual_seed(999);
  c.model->train();
  LoadedTrainingState info = load_training_state(path, c.parts());
  CHECK(info.step == k);
  CHECK(info.metadata.at("note") == "hello");
  CHECK(info.metadata.at("format") == "snug.checkpoint.v1");
  CHECK(c.sched->last_step() == k);
  CHECK(c.opt->step_count() == k);
  CHECK(c.opt->lr() == lr_at_k);
  CHECK(c.data.get_state().offset == b.data.get_state().offset);
  for (int s = k; s < Run::kSteps; ++s) c.step();

  REQUIRE(c.losses.size() == size_t(Run::kSteps - k));
  for (int s = 0; s < k; ++s) CHECK(b.losses[s] == a.losses[s]);
  for (int s = k; s < Run::kSteps; ++s) {
    INFO("step ", s);
    CHECK(c.losses[s - k] == a.losses[s]);  // exactly
  }
  check_same_params(*a.model, *c.model);
  // The optimizer state matches too.
  auto sa = a.opt->state_dict(), sc = c.opt->state_dict();
  REQUIRE(sa.size() == sc.size());
  for (size_t i = 0; i < sa.size(); ++i) CHECK(same_bytes(sa[i].second, sc[i].second));
}

TEST_CASE("strict load: a mismatched model is an error listing the keys, and nothing is modified") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  Run r(1, 2);
  r.step();
  save_training_state(path, r.parts(), 1);

  models::GPTConfig cfg = tiny_cfg();
  cfg.layers = 2;
  cfg.embd = 8;
  manual_seed(5);
  models::GPT other(cfg);
  auto before = other.state_dict();
  NamedTensors snapshot;
  for (auto& [n, t] : before) snapshot.emplace_back(n, t.clone());
  std::string m = error_of<ValueError>([&] { load_training_state(path, {&other}); });
  CHECK(m.find("missing keys") != std::string::npos);
  CHECK(m.find("blocks.1.ln_1.weight") != std::string::npos);
  CHECK(m.find("shape mismatches") != std::string::npos);
  CHECK(m.find("wte.weight") != std::string::npos);
  auto after = other.state_dict();
  for (size_t i = 0; i < after.size(); ++i) CHECK(same_bytes(after[i].second, snapshot[i].second));

  // A matching model but an optimizer of another layout: the error leaves the
  // model and the optimizer as they were.
  manual_seed(6);
  models::GPT same(tiny_cfg());
  NamedTensors model_before;
  for (auto& [n, t] : same.state_dict()) model_before.emplace_back(n, t.clone());
  std::vector<Tensor> half = same.parameters();
  half.resize(half.size() / 2);
  optim::AdamW opt(half, {.lr = 0.5});
  CHECK_THROWS(load_training_state(path, {&same, &opt}));
  auto now = same.state_dict();
  for (size_t i = 0; i < now.size(); ++i) {
    INFO(now[i].first);
    CHECK(same_bytes(now[i].second, model_before[i].second));
  }
  CHECK(opt.step_count() == 0);
  CHECK(opt.lr() == 0.5);

  // An optimizer was given but the file has no optimizer state.
  const std::string model_only = dir.file("model_only.safetensors");
  save_training_state(model_only, {r.model.get()}, 1);
  optim::AdamW opt2(r.model->parameters(), {});
  std::string m2 = error_of<IOError>([&] { load_training_state(model_only, {r.model.get(), &opt2}); });
  CHECK(m2.find(model_only) != std::string::npos);
  // Model only loads fine.
  CHECK(load_training_state(model_only, {r.model.get()}).step == 1);
}

TEST_CASE("truncated, corrupted and foreign files are rejected with an IOError naming the file") {
  TempDir dir;
  const std::string good = dir.file("good.safetensors");
  Run r(3, 4);
  r.step();
  save_training_state(good, r.parts(), 1);
  const std::string bytes = read_bytes(good);
  REQUIRE(bytes.size() > 200);

  for (size_t cut : {bytes.size() - 1, bytes.size() / 2, size_t(20), size_t(5), size_t(0)}) {
    INFO("truncated to ", cut);
    const std::string p = dir.file("trunc.safetensors");
    write_bytes(p, bytes.substr(0, cut));
    std::string m = error_of<IOError>([&] { load_training_state(p, r.parts()); });
    CHECK(m.find(p) != std::string::npos);
  }
  // Corrupt the JSON header: replace its opening brace, then a byte in the middle of it.
  uint64_t hlen = 0;
  std::memcpy(&hlen, bytes.data(), 8);
  REQUIRE(hlen > 10);
  for (size_t pos : {size_t(8), size_t(8 + hlen / 2), size_t(8 + hlen - 1)}) {
    INFO("corrupt byte at ", pos);
    std::string bad = bytes;
    bad[pos] = '\x01';
    const std::string p = dir.file("corrupt.safetensors");
    write_bytes(p, bad);
    std::string m = error_of<IOError>([&] { load_training_state(p, r.parts()); });
    CHECK(m.find(p) != std::string::npos);
  }
  // A header length pointing past the end.
  {
    std::string bad = bytes;
    uint64_t huge = bytes.size() * 4;
    std::memcpy(bad.data(), &huge, 8);
    const std::string p = dir.file("len.safetensors");
    write_bytes(p, bad);
    std::string m = error_of<IOError>([&] { load_training_state(p, r.parts()); });
    CHECK(m.find(p) != std::string::npos);
  }
  // A valid safetensors file that is not a snug checkpoint.
  const std::string plain = dir.file("plain.safetensors");
  save_safetensors(plain, {{"model.wte.weight", zeros({11, 16})}});
  std::string m = error_of<IOError>([&] { load_training_state(plain, r.parts()); });
  CHECK(m.find(plain) != std::string::npos);
  CHECK(m.find("not a snug checkpoint") != std::string::npos);
  // A missing file.
  m = error_of<IOError>([&] { load_training_state(dir.file("absent.safetensors"), r.parts()); });
  CHECK(m.find("absent.safetensors") != std::string::npos);
  // The good file still loads.
  CHECK(load_training_state(good, r.parts()).step == 1);
}

TEST_CASE("a checkpoint carries the model's configuration: the model is rebuilt from the file alone") {
  TempDir dir;
  const std::string path = dir.file("config.safetensors");
  models::GPTConfig cfg{.vocab = 13, .block = 6, .layers = 3, .heads = 2, .embd = 8, .dropout = 0.25};
  manual_seed(5);
  models::GPT model(cfg);
  optim::AdamW opt(model.parameters(), {.lr = 1e-2});
  save_training_state(path, {&model, &opt}, 2, cfg.to_metadata());

  // What a program does on resume: read the metadata, build, load.
  const auto md = read_training_state_metadata(path);
  CHECK(md.at("step") == "2");
  const std::optional<models::GPTConfig> back = models::GPTConfig::from_metadata(md, path);
  REQUIRE(back.has_value());
  CHECK(back->layers == 3);
  CHECK(back->embd == 8);
  CHECK(back->block == 6);
  CHECK(back->vocab == 13);
  CHECK(back->heads == 2);
  CHECK(back->dropout == 0.25);
  models::GPT rebuilt(*back);
  optim::AdamW opt2(rebuilt.parameters(), {.lr = 1e-2});
  CHECK(load_training_state(path, {&rebuilt, &opt2}).step == 2);
  check_same_params(model, rebuilt);

  // A file saved without a configuration reads as none.
  const std::string bare = dir.file("bare.safetensors");
  save_training_state(bare, {&model}, 1);
  CHECK_FALSE(models::GPTConfig::from_metadata(read_training_state_metadata(bare), bare).has_value());
  // Truncated, and not a checkpoint: IOErrors naming the file.
  const std::string bytes = read_bytes(path);
  const std::string cut = dir.file("cut.safetensors");
  write_bytes(cut, bytes.substr(0, bytes.size() / 2));
  CHECK(error_of<IOError>([&] { read_training_state_metadata(cut); }).find(cut) != std::string::npos);
  const std::string plain = dir.file("plain.safetensors");
  save_safetensors(plain, {{"w", zeros({2})}});
  std::string m = error_of<IOError>([&] { read_training_state_metadata(plain); });
  CHECK(m.find(plain) != std::string::npos);
  CHECK(m.find("not a snug checkpoint") != std::string::npos);
}

TEST_CASE("a failed save leaves the previous checkpoint intact and loadable") {
  TempDir dir;
  const std::string path = dir.file("ckpt.safetensors");
  Run r(11, 12);
  r.step();
  save_training_state(path, r.parts(), 1);
  const std::string old_bytes = read_bytes(path);
  r.step();  // the state moves on

  // Into a directory that does not exist.
  std::string missing = dir.file("no/such/dir/ckpt.safetensors");
  std::string m = error_of<IOError>([&] { save_training_state(missing, r.parts(), 2); });
  CHECK(m.find("no/such/dir") != std::string::npos);
  CHECK_FALSE(fs::exists(missing));

  // With a file-size limit smaller than the checkpoint: the write fails midway.
  struct rlimit old_lim {};
  REQUIRE(::getrlimit(RLIMIT_FSIZE, &old_lim) == 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG, not a signal
  struct rlimit lim = old_lim;
  lim.rlim_cur = old_bytes.size() / 2;
  REQUIRE(::setrlimit(RLIMIT_FSIZE, &lim) == 0);
  std::string err;
  try {
    save_training_state(path, r.parts(), 2);
  } catch (const IOError& e) {
    err = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_lim);
  std::signal(SIGXFSZ, old_handler);
  CHECK_FALSE(err.empty());
  CHECK(read_bytes(path) == old_bytes);
  // No temporary file is left behind.
  int files = 0;
  for (auto& e : fs::directory_iterator(dir.path)) files += e.is_regular_file();
  CHECK(files == 1);
  // It loads, as step 1.
  Run fresh(99, 98);
  CHECK(load_training_state(path, fresh.parts()).step == 1);
  CHECK(fresh.opt->step_count() == 1);
  // A later successful save replaces it.
  save_training_state(path, r.parts(), 2);
  CHECK(load_training_state(path, fresh.parts()).step == 2);
  CHECK_THROWS_AS(save_training_state(path, TrainingStateParts{}, 0), ValueError);
}
