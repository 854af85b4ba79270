// SPDX-License-Identifier: MIT
#include <snug/data/mnist.h>

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <vector>

#include <snug/base/error.h>
#include <snug/data/file_bytes.h>
#include <snug/memory/allocator.h>

namespace snug::data {

namespace {

uint32_t be32(const std::vector<uint8_t>& b, size_t at) {
  return (uint32_t(b[at]) << 24) | (uint32_t(b[at + 1]) << 16) | (uint32_t(b[at + 2]) << 8) | uint32_t(b[at + 3]);
}

// Checks the magic number and reads `ndims` dimensions; returns the header size.
size_t read_header(const std::vector<uint8_t>& b, const std::string& path, uint32_t magic, int ndims, const char* what,
                   std::vector<int64_t>& dims) {
  const size_t header = 4 + 4 * size_t(ndims);
  if (b.size() >= 4 && be32(b, 0) != magic)
    throw IOError(str(path, ": bad magic number 0x", std::hex, be32(b, 0), " at offset 0 (expected 0x", magic, std::dec,
                      ": IDX unsigned bytes with ", ndims, " dims, MNIST ", what, ")"));
  SNUG_CHECK(b.size() >= header, IOError, path, ": truncated header at offset ", b.size(), " (the file has ", b.size(),
             " bytes; an IDX ", what, " header has ", header, ")");
  for (int d = 0; d < ndims; ++d) {
    const uint32_t v = be32(b, 4 + 4 * size_t(d));
    SNUG_CHECK(v > 0 && v < (1u << 30), IOError, path, ": implausible dimension ", v, " at offset ", 4 + 4 * d);
    dims.push_back(int64_t(v));
  }
  return header;
}

void check_size(const std::vector<uint8_t>& b, const std::string& path, size_t header, int64_t payload,
                const char* what) {
  const size_t want = header + size_t(payload);
  SNUG_CHECK(b.size() >= want, IOError, path, ": truncated at offset ", b.size(), " (the header promises ", payload,
             " bytes of ", what, ", so ", want, " bytes in all)");
  SNUG_CHECK(b.size() == want, IOError, path, ": ", b.size() - want, " unexpected trailing bytes at offset ", want,
             " (the header promises ", payload, " bytes of ", what, ")");
}

std::string find_file(const std::string& dir, const std::string& name) {
  namespace fs = std::filesystem;
  SNUG_CHECK(fs::is_directory(dir), IOError, "load_mnist: directory ", dir, " does not exist");
  for (const std::string& cand : {name + ".gz", name}) {
    fs::path p = fs::path(dir) / cand;
    if (fs::is_regular_file(p)) return p.string();
  }
  throw IOError(str("load_mnist: ", (std::filesystem::path(dir) / name).string(), "(.gz) not found: neither ", name,
                    ".gz nor ", name, " is in ", dir));
}

}  // namespace

Tensor read_idx_images(const std::string& path) {
  std::vector<uint8_t> b = read_file_bytes(path);
  std::vector<int64_t> d;
  size_t header = read_header(b, path, 0x00000803u, 3, "images", d);
  // Each dim is < 2^30, so the product can overflow int64: bound it by the
  // file first (found by fuzzing, tests/fuzz/corpus/fuzz_idx/regress_*).
  const auto avail = static_cast<int64_t>(b.size() - header);
  SNUG_CHECK(d[0] * d[1] <= avail && d[0] * d[1] * d[2] <= avail, IOError, path, ": truncated at offset ", b.size(),
             " (the header promises ", d[0], " x ", d[1], " x ", d[2], " pixels, the file holds ", avail, ")");
  check_size(b, path, header, d[0] * d[1] * d[2], "pixels");
  memory::TagScope tag(memory::Tag::data);
  return from_blob_copy(b.data() + header, {d[0], d[1], d[2]}, DType::u8, DType::u8);
}

Tensor read_idx_labels(const std::string& path, int64_t max_label) {
  std::vector<uint8_t> b = read_file_bytes(path);
  std::vector<int64_t> d;
  size_t header = read_header(b, path, 0x00000801u, 1, "labels", d);
  check_size(b, path, header, d[0], "labels");
  memory::TagScope tag(memory::Tag::data);
  Tensor out = empty({d[0]}, DType::i64);
  int64_t* p = out.data<int64_t>();
  for (int64_t i = 0; i < d[0]; ++i) {
    const uint8_t v = b[header + size_t(i)];
    SNUG_CHECK(int64_t(v) <= max_label, IOError, path, ": label ", int(v), " of item ", i, " at offset ",
               header + size_t(i), " is out of range (expected 0..", max_label, ")");
    p[i] = v;
  }
  return out;
}

MnistSplit load_mnist(const std::string& dir, bool train, const MnistOptions& opt) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string ipath = find_file(dir, prefix + "-images-idx3-ubyte");
  const std::string lpath = find_file(dir, prefix + "-labels-idx1-ubyte");
  Tensor raw_images = read_idx_images(ipath);  // (N, rows, cols) u8
  Tensor labels = read_idx_labels(lpath);
  const int64_t N = raw_images.size(0), R = raw_images.size(1), C = raw_images.size(2);
  SNUG_CHECK(R == 28 && C == 28, IOError, ipath, ": images are ", R, "x", C, " (dims at offset 8), MNIST's are 28x28");
  SNUG_CHECK(labels.size(0) == N, IOError, lpath, ": ", labels.size(0), " labels (count at offset 4) but ", ipath,
             " has ", N, " images");
  memory::TagScope tag(memory::Tag::data);
  Tensor images = empty({N, 1, R, C}, DType::f32);
  const uint8_t* src = raw_images.data<uint8_t>();
  float* dst = images.data<float>();
  const float scale = opt.normalize ? 1.0f / (255.0f * 0.3081f) : 1.0f / 255.0f;
  const float shift = opt.normalize ? -0.1307f / 0.3081f : 0.0f;
  for (int64_t i = 0; i < N * R * C; ++i) dst[i] = float(src[i]) * scale + shift;
  return {images, labels};
}

}  // namespace snug::data
