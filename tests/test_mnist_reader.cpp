// SPDX-License-Identifier: MIT
// MNIST IDX reader: the real files when present (counts, label histogram,
// pixel range), and hand-made good, corrupt and truncated files.
#include <doctest/doctest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <snug/data/mnist.h>

using namespace snug;
namespace fs = std::filesystem;

namespace {

// The real files, where examples/mnist looks: datasets/mnist (scripts/get_data.sh),
// else ../shared/data/mnist beside the repository. Empty when neither exists.
std::string mnist_dir() {
  const char* src = std::getenv("SNUG_SOURCE_DIR");
  const fs::path root = src ? src : ".";
  for (const fs::path& p : {root / "datasets" / "mnist", root / ".." / "shared" / "data" / "mnist"})
    if (fs::exists(p)) return p.string();
  return std::string();
}

// A fresh temporary directory, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    path = fs::temp_directory_path() /
           ("snug_mnist_test_" + std::to_string(::getpid()) + "_" + std::to_string(reinterpret_cast<uintptr_t>(this)));
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  std::string file(const std::string& name) const { return (path / name).string(); }
};

void put_be32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(uint8_t(v >> s));
}
std::vector<uint8_t> idx_images(uint32_t n, uint32_t rows, uint32_t cols, uint32_t magic = 0x803) {
  std::vector<uint8_t> b;
  put_be32(b, magic);
  put_be32(b, n);
  put_be32(b, rows);
  put_be32(b, cols);
  for (uint32_t i = 0; i < n * rows * cols; ++i) b.push_back(uint8_t(i % 256));
  return b;
}
std::vector<uint8_t> idx_labels(const std::vector<uint8_t>& labels) {
  std::vector<uint8_t> b;
  put_be32(b, 0x801);
  put_be32(b, uint32_t(labels.size()));
  b.insert(b.end(), labels.begin(), labels.end());
  return b;
}
void write_raw(const std::string& path, const std::vector<uint8_t>& b) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
}
void write_gz(const std::string& path, const std::vector<uint8_t>& b) {
  gzFile f = gzopen(path.c_str(), "wb");
  REQUIRE(f != nullptr);
  gzwrite(f, b.data(), unsigned(b.size()));
  gzclose(f);
}
std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

}  // namespace

TEST_CASE("the real MNIST files: sizes, label histogram, pixel range") {
  const std::string dir = mnist_dir();
  if (dir.empty()) {
    MESSAGE(
        "skipped: no MNIST in $SNUG_SOURCE_DIR/datasets/mnist or $SNUG_SOURCE_DIR/../shared/data/mnist "
        "(scripts/get_data.sh mnist fetches it); the hand-made files below still run");
    return;
  }
  data::MnistSplit train = data::load_mnist(dir, true);
  CHECK(train.images.shape() == Shape{60000, 1, 28, 28});
  CHECK(train.images.dtype() == DType::f32);
  CHECK(train.labels.shape() == Shape{60000});
  CHECK(train.labels.dtype() == DType::i64);
  std::vector<int64_t> counts(10, 0);
  const int64_t* lp = train.labels.data<int64_t>();
  for (int64_t i = 0; i < 60000; ++i) counts[size_t(lp[i])]++;
  CHECK(counts == std::vector<int64_t>{5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949});
  const float* ip = train.images.data<float>();
  float lo = 1, hi = 0;
  double sum = 0;
  for (int64_t i = 0; i < train.images.numel(); ++i) {
    lo = std::min(lo, ip[i]);
    hi = std::max(hi, ip[i]);
    sum += ip[i];
  }
  CHECK(lo == 0.0f);
  CHECK(hi == 1.0f);
  CHECK(sum / double(train.images.numel()) == doctest::Approx(0.1307).epsilon(1e-3));

  data::MnistSplit test = data::load_mnist(dir, false, {.normalize = true});
  CHECK(test.images.shape() == Shape{10000, 1, 28, 28});
  CHECK(test.labels.shape() == Shape{10000});
  CHECK(test.labels.data<int64_t>()[0] == 7);  // the first test digit is a 7
  CHECK(test.images.data<float>()[0] == doctest::Approx(-0.1307 / 0.3081));
}

TEST_CASE("hand-made IDX files, gzip'd and raw") {
  TempDir d;
  write_gz(d.file("train-images-idx3-ubyte.gz"), idx_images(3, 28, 28));
  write_raw(d.file("train-labels-idx1-ubyte"), idx_labels({0, 9, 4}));
  data::MnistSplit s = data::load_mnist(d.path.string(), true);
  CHECK(s.images.shape() == Shape{3, 1, 28, 28});
  CHECK(s.labels.to_vector<int64_t>() == std::vector<int64_t>{0, 9, 4});
  CHECK(s.images.data<float>()[255] == 1.0f);
  CHECK(s.images.data<float>()[1] == doctest::Approx(1 / 255.0));
  Tensor raw = data::read_idx_images(d.file("train-images-idx3-ubyte.gz"));
  CHECK(raw.shape() == Shape{3, 28, 28});
  CHECK(raw.dtype() == DType::u8);
}

TEST_CASE("missing, corrupt and truncated files throw IOError with the file and offset") {
  TempDir d;
  const std::string dir = d.path.string();
  CHECK_THROWS_WITH_AS(data::load_mnist(dir + "/nope", true), doctest::Contains("does not exist"), IOError);
  CHECK_THROWS_WITH_AS(data::load_mnist(dir, false), doctest::Contains("t10k-images-idx3-ubyte.gz nor"), IOError);

  const std::string img = d.file("img"), lab = d.file("lab");
  // Wrong magic (a labels file read as images).
  write_raw(img, idx_labels({1, 2}));
  CHECK_THROWS_WITH_AS(data::read_idx_images(img),
                       doctest::Contains((img + ": bad magic number 0x801 at offset 0").c_str()), IOError);
  // Found by fuzzing (tests/fuzz/corpus/fuzz_idx/regress_*): dims whose product
  // overflows int64 in a 17-byte file are a truncation error, not undefined behaviour.
  write_raw(img, std::vector<uint8_t>{0, 0, 8, 3, 2, 0, 0, 0, 0, 0x11, 0, 4, 8, 9, 1, 2, 0x3f});
  CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains("truncated"), IOError);
  {
    std::vector<uint8_t> huge;
    put_be32(huge, 0x803);
    for (int k = 0; k < 3; ++k) put_be32(huge, (1u << 30) - 1);
    write_raw(img, huge);
    CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains("truncated"), IOError);
  }
  // Header cut short.
  write_raw(img, std::vector<uint8_t>{0, 0, 8, 3, 0, 0});
  CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains("truncated header at offset 6"), IOError);
  // Pixels cut short: 2 images of 4x4 promise 32 bytes after the 16-byte header.
  auto b = idx_images(2, 4, 4);
  b.resize(16 + 20);
  write_raw(img, b);
  CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains((img + ": truncated at offset 36").c_str()),
                       IOError);
  // Trailing garbage.
  b = idx_images(2, 4, 4);
  b.push_back(7);
  write_raw(img, b);
  CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains("1 unexpected trailing bytes at offset 48"),
                       IOError);
  // A zero dimension.
  write_raw(img, idx_images(0, 4, 4));
  CHECK_THROWS_WITH_AS(data::read_idx_images(img), doctest::Contains("implausible dimension 0 at offset 4"), IOError);
  // A label out of range names the item and its offset.
  write_raw(lab, idx_labels({1, 2, 10, 3}));
  CHECK_THROWS_WITH_AS(data::read_idx_labels(lab),
                       doctest::Contains((lab + ": label 10 of item 2 at offset 10").c_str()), IOError);
  // A gzip stream cut in the middle.
  const std::string gz = d.file("img.gz");
  write_gz(gz, idx_images(50, 28, 28));
  auto z = read_bytes(gz);
  z.resize(z.size() / 2);
  write_raw(gz, z);
  CHECK_THROWS_WITH_AS(data::read_idx_images(gz), doctest::Contains(gz.c_str()), IOError);
  CHECK_THROWS_WITH_AS(data::read_idx_images(gz), doctest::Contains("offset"), IOError);
  // Corrupt deflate data (bytes flipped after the gzip header).
  write_gz(gz, idx_images(50, 28, 28));
  z = read_bytes(gz);
  for (size_t i = 20; i < 60 && i < z.size(); ++i) z[i] ^= 0x5a;
  write_raw(gz, z);
  CHECK_THROWS_WITH_AS(data::read_idx_images(gz), doctest::Contains("offset"), IOError);
  // Images and labels that disagree on the count.
  write_raw(d.file("train-images-idx3-ubyte"), idx_images(3, 28, 28));
  write_raw(d.file("train-labels-idx1-ubyte"), idx_labels({1, 2}));
  CHECK_THROWS_WITH_AS(data::load_mnist(dir, true), doctest::Contains("2 labels (count at offset 4) but"), IOError);
  // Not 28x28.
  write_raw(d.file("train-images-idx3-ubyte"), idx_images(2, 4, 4));
  CHECK_THROWS_WITH_AS(data::load_mnist(dir, true), doctest::Contains("images are 4x4"), IOError);
}
