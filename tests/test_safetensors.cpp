// SPDX-License-Identifier: MIT
// safetensors I/O: round trips of every dtype and layout, metadata, the atomic
// write, every corruption the reader must catch, truncation and byte-flip
// sweeps, and interop with the reference Python package.
//
// Interop, both directions:
//   * Python -> snug: tests/data/fixture.safetensors was written by
//       python tests/data/make_safetensors_fixture.py
//     (pip install safetensors numpy) and the "reads the Python fixture" case
//     checks every value bit for bit. Regenerate it only if the values change.
//   * snug -> Python: run, from the repository root,
//       SNUG_INTEROP_OUT=/tmp/snug_written.safetensors build-st/tests/test_safetensors -tc='*snug-written*'
//       python tests/data/make_safetensors_fixture.py --check /tmp/snug_written.safetensors
//     The script reads the file with the reference package and exits non-zero
//     on any difference. The values here and in the script must stay in step.
#include <doctest/doctest.h>

#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include <snug/core/raw_ops.h>
#include <snug/core/safetensors.h>
#include <snug/memory/allocator.h>

using namespace snug;
namespace fs = std::filesystem;

namespace {

// A fresh directory, removed with everything in it at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    static int n = 0;
    path = fs::temp_directory_path() / ("snug_safetensors_" + std::to_string(::getpid()) + "_" + std::to_string(n++));
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Names in the directory that look like our temporary files.
  std::vector<std::string> temp_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::recursive_directory_iterator(path))
      if (e.path().filename().string().find(".tmp-") != std::string::npos) out.push_back(e.path().string());
    return out;
  }
};

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string bytes_of(const Tensor& t) {
  Tensor c = raw::contiguous(t);
  return std::string(static_cast<const char*>(c.data_ptr()), c.nbytes());
}

void check_same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.defined());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.shape() == want.shape());
  // (Tensor::is_contiguous() says false for some empty shapes, e.g. [2, 0, 3];
  // an empty tensor has no layout to get wrong, so only non-empty ones are checked.)
  if (got.numel() > 0) CHECK(got.is_contiguous());
  CHECK(bytes_of(got) == bytes_of(want));
}

// Values that differ per element and fit every dtype.
Tensor sample(DType dt, const Shape& shape, double start = 0) {
  std::vector<double> v(static_cast<std::size_t>(numel_of(shape)));
  for (std::size_t i = 0; i < v.size(); ++i) {
    double x = start + static_cast<double>(i);
    if (dt == DType::b8)
      v[i] = static_cast<double>((i * 7 + 3) % 3 == 0);
    else if (dt == DType::u8)
      v[i] = static_cast<double>((i * 37) % 251);
    else if (is_floating(dt))
      v[i] = x * 1.25 - 3.5;
    else
      v[i] = x * 3 - 7;
  }
  return from_vector<double>(v, shape, TensorOptions(dt));
}

const DType kAll[] = {kFloat32, kFloat16, kBFloat16, kFloat64, kInt8, kUInt8, kInt32, kInt64, kBool};

// Builds a file from a header text and data bytes (the header is used as is).
std::string craft(const std::string& header, const std::string& data = "") {
  uint64_t n = header.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}
std::string f32_bytes(std::initializer_list<float> v) {
  std::string s(v.size() * 4, '\0');
  std::memcpy(s.data(), std::data(v), s.size());
  return s;
}

// The message of the IOError that loading `bytes` throws (empty if none).
std::string load_error(const std::string& bytes, const std::string& name = "bad.safetensors") {
  try {
    from_safetensors_bytes(bytes, name);
  } catch (const IOError& e) {
    return e.what();
  }
  return "";
}

// Loading must throw IOError naming the file, "offset" and `fragment`.
void expect_corrupt(const std::string& bytes, const std::string& fragment) {
  std::string msg = load_error(bytes);
  INFO("message: ", msg);
  CHECK(!msg.empty());
  CHECK(msg.find("bad.safetensors") != std::string::npos);
  CHECK(msg.find("offset") != std::string::npos);
  CHECK(msg.find(fragment) != std::string::npos);
}

std::string fixture_path() {
  if (const char* src = std::getenv("SNUG_SOURCE_DIR")) return std::string(src) + "/tests/data/fixture.safetensors";
  MESSAGE("SNUG_SOURCE_DIR is not set (run through ctest); using the path of this source file");
  return (fs::path(__FILE__).parent_path() / "data" / "fixture.safetensors").string();
}

const Tensor& find(const TensorMap& m, const std::string& name) {
  for (const auto& [k, t] : m)
    if (k == name) return t;
  FAIL("no tensor named ", name);
  static Tensor none;
  return none;
}

template <class T>
std::vector<T> raw_values(const Tensor& t) {
  std::vector<T> v(static_cast<std::size_t>(t.numel()));
  if (!v.empty()) std::memcpy(v.data(), raw::contiguous(t).data_ptr(), v.size() * sizeof(T));
  return v;
}
template <class T>
std::vector<T> bits_of(std::initializer_list<float> vals) {
  std::vector<T> out;
  for (float f : vals) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    out.push_back(static_cast<T>(u));
  }
  return out;
}

}  // namespace

// ============================================================================
// Round trips
// ============================================================================

TEST_CASE("safetensors: every dtype round-trips, including 0-d and empty tensors") {
  TempDir dir;
  TensorMap in;
  for (DType dt : kAll) {
    std::string n = dtype_name(dt);
    in.emplace_back(n + "_scalar", sample(dt, {}, 5));
    in.emplace_back(n + "_vec", sample(dt, {7}));
    in.emplace_back(n + "_3d", sample(dt, {2, 3, 4}, 1));
    in.emplace_back(n + "_empty", sample(dt, {2, 0, 3}));
    in.emplace_back(n + "_empty1", sample(dt, {0}));
  }
  std::string path = dir.file("all.safetensors");
  save_safetensors(path, in);
  for (const SafetensorsFile& f : {load_safetensors(path), from_safetensors_bytes(to_safetensors_bytes(in))}) {
    REQUIRE(f.tensors.size() == in.size());
    CHECK(f.metadata.empty());
    for (std::size_t i = 0; i < in.size(); ++i) {
      INFO("tensor ", in[i].first);
      CHECK(f.tensors[i].first == in[i].first);  // order kept
      check_same(f.tensors[i].second, in[i].second);
    }
  }
  CHECK(read_bytes(path) == to_safetensors_bytes(in));
}

TEST_CASE("safetensors: the layout is the reference writer's (padded header, data back to back)") {
  TensorMap in{{"a", sample(kFloat32, {3})}, {"b", sample(kInt8, {2})}};
  std::string b = to_safetensors_bytes(in, {{"k", "v"}});
  uint64_t n = 0;
  std::memcpy(&n, b.data(), 8);
  CHECK((8 + n) % 8 == 0);
  CHECK(b[8] == '{');
  CHECK(b.size() == 8 + n + 12 + 2);
  CHECK(b.substr(8 + n) == bytes_of(in[0].second) + bytes_of(in[1].second));
  std::string header = b.substr(8, n);
  CHECK(header.find("\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,12]}") != std::string::npos);
  CHECK(header.find("\"b\":{\"dtype\":\"I8\",\"shape\":[2],\"data_offsets\":[12,14]}") != std::string::npos);
  CHECK(header.find("\"__metadata__\":{\"k\":\"v\"}") != std::string::npos);
}

TEST_CASE("safetensors: non-contiguous inputs are written as their values") {
  for (DType dt : kAll) {
    INFO("dtype ", dtype_name(dt));
    Tensor base = sample(dt, {3, 4});
    Tensor tr = raw::transpose(base, 0, 1);                     // [4, 3], strides (1, 4)
    Tensor strided = raw::slice(base, 1, 0, 4, 2);              // [3, 2], stride 2
    Tensor expanded = raw::expand(sample(dt, {1, 3}), {4, 3});  // stride 0
    REQUIRE_FALSE(tr.is_contiguous());
    TensorMap in{{"t", tr}, {"s", strided}, {"e", expanded}, {"off", raw::select(base, 0, 2)}};
    auto f = from_safetensors_bytes(to_safetensors_bytes(in));
    for (std::size_t i = 0; i < in.size(); ++i) check_same(f.tensors[i].second, raw::contiguous(in[i].second));
    CHECK(f.tensors[0].second.shape() == Shape{4, 3});
  }
}

TEST_CASE("safetensors: metadata round-trips (unicode, empty strings)") {
  std::map<std::string, std::string> meta{{"format", "pt"},
                                          {"empty", ""},
                                          {"", "empty key"},
                                          {"unicode", "h\xc3\xa9llo \xe2\x9c\x93"},
                                          {"quotes", "a \"b\" \\ c\n"}};
  TempDir dir;
  save_safetensors(dir.file("m.safetensors"), {{"x", sample(kFloat32, {2})}}, meta);
  auto f = load_safetensors(dir.file("m.safetensors"));
  CHECK(f.metadata == meta);
  // Only metadata, no tensors, is a valid file too.
  auto g = from_safetensors_bytes(to_safetensors_bytes({}, meta));
  CHECK(g.tensors.empty());
  CHECK(g.metadata == meta);
  auto h = from_safetensors_bytes(to_safetensors_bytes({}));
  CHECK(h.tensors.empty());
}

TEST_CASE("safetensors: loading onto a virtual CPU device goes through its allocator") {
  Device d1("cpu:1");
  TensorMap in{{"w", sample(kFloat32, {64, 64})}, {"b", sample(kFloat16, {64})}};
  std::string bytes = to_safetensors_bytes(in);
  std::size_t before = memory::allocated(d1);
  {
    auto f = from_safetensors_bytes(bytes, "<memory>", d1);
    for (std::size_t i = 0; i < in.size(); ++i) {
      CHECK(f.tensors[i].second.device() == d1);
      check_same(f.tensors[i].second, in[i].second);
    }
    CHECK(memory::allocated(d1) >= before + 64 * 64 * 4 + 64 * 2);
  }
  CHECK(memory::allocated(d1) == before);
  // Saving from that device writes the same bytes.
  auto f = from_safetensors_bytes(bytes, "<memory>", d1);
  CHECK(to_safetensors_bytes(f.tensors) == bytes);
}

TEST_CASE("safetensors: bad arguments to save throw ValueError and write nothing") {
  TempDir dir;
  std::string path = dir.file("x.safetensors");
  Tensor a = sample(kFloat32, {2});
  CHECK_THROWS_AS(save_safetensors(path, {{"a", a}, {"a", a}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(path, {{"__metadata__", a}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(path, {{"u", Tensor()}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(path, {{"bad\xff", a}}), ValueError);
  CHECK_THROWS_AS(save_safetensors(path, {{"a", a}}, {{"k", "\xc3"}}), ValueError);
  CHECK_FALSE(fs::exists(path));
  CHECK(dir.temp_files().empty());
}

// ============================================================================
// Atomic write
// ============================================================================

TEST_CASE("safetensors: save replaces the old file and leaves no temporary file") {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  save_safetensors(path, {{"old", sample(kFloat32, {4})}});
  save_safetensors(path, {{"new", sample(kInt64, {3})}});
  auto f = load_safetensors(path);
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].first == "new");
  CHECK(dir.temp_files().empty());
  // A relative path (directory ".") works too.
  auto cwd = fs::current_path();
  fs::current_path(dir.path);
  save_safetensors("rel.safetensors", {{"x", sample(kFloat32, {1})}});
  fs::current_path(cwd);
  CHECK(load_safetensors(dir.file("rel.safetensors")).tensors.size() == 1);
}

TEST_CASE("safetensors: a save removes temporaries of killed writers, not of live ones") {
  TempDir dir;
  std::string path = dir.file("w.safetensors");
  // A writer that no longer exists: a child that exited and was reaped.
  pid_t dead = ::fork();
  REQUIRE(dead >= 0);
  if (dead == 0) ::_exit(0);
  int st = 0;
  REQUIRE(::waitpid(dead, &st, 0) == dead);
  auto touch = [](const std::string& p) { std::ofstream(p) << "torn"; };
  std::string orphan = str(path, ".tmp-", dead, "-7");
  std::string live = str(path, ".tmp-", ::getppid(), "-3");                 // our parent is alive
  std::string other = str(dir.file("v.safetensors"), ".tmp-", dead, "-1");  // another target
  std::string odd = path + ".tmp-notapid-1";                                // not ours
  for (const auto& p : {orphan, live, other, odd}) touch(p);
  save_safetensors(path, {{"x", sample(kFloat32, {2})}});
  CHECK_FALSE(fs::exists(orphan));
  CHECK(fs::exists(live));
  CHECK(fs::exists(other));
  CHECK(fs::exists(odd));
  CHECK(load_safetensors(path).tensors.size() == 1);
}

TEST_CASE("safetensors: a failed save names the path and the OS error, keeps the old file, cleans up") {
  TempDir dir;
  TensorMap small{{"old", sample(kFloat32, {4})}};

  SUBCASE("missing directory") {
    std::string path = dir.file("no/such/dir/x.safetensors");
    try {
      save_safetensors(path, small);
      FAIL("expected IOError");
    } catch (const IOError& e) {
      std::string m = e.what();
      CHECK(m.find(path) != std::string::npos);
      CHECK(m.find(std::strerror(ENOENT)) != std::string::npos);
    }
    CHECK(dir.temp_files().empty());
  }

  SUBCASE("the target is a non-empty directory: rename fails, the directory survives") {
    std::string path = dir.file("target.safetensors");
    fs::create_directories(path);
    write_bytes(path + "/keep", "precious");
    try {
      save_safetensors(path, small);
      FAIL("expected IOError");
    } catch (const IOError& e) {
      std::string m = e.what();
      CHECK(m.find(path) != std::string::npos);
      CHECK(m.find("rename") != std::string::npos);
    }
    CHECK(read_bytes(path + "/keep") == "precious");
    CHECK(dir.temp_files().empty());
  }

  SUBCASE("a write fails half way (file size limit): the old file is untouched") {
    std::string path = dir.file("big.safetensors");
    save_safetensors(path, small);
    std::string old = read_bytes(path);
    struct rlimit saved {};
    REQUIRE(::getrlimit(RLIMIT_FSIZE, &saved) == 0);
    auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // write() then fails with EFBIG
    struct rlimit low = saved;
    low.rlim_cur = 64 * 1024;
    REQUIRE(::setrlimit(RLIMIT_FSIZE, &low) == 0);
    std::string msg;
    try {
      save_safetensors(path, {{"big", sample(kFloat32, {256, 1024})}});  // 1 MiB
    } catch (const IOError& e) {
      msg = e.what();
    }
    ::setrlimit(RLIMIT_FSIZE, &saved);
    std::signal(SIGXFSZ, old_handler);
    INFO("message: ", msg);
    CHECK(msg.find(path) != std::string::npos);
    CHECK(msg.find(std::strerror(EFBIG)) != std::string::npos);
    CHECK(read_bytes(path) == old);
    CHECK(load_safetensors(path).tensors[0].first == "old");
    CHECK(dir.temp_files().empty());
  }
}

// ============================================================================
// Reading hostile files
// ============================================================================

TEST_CASE("safetensors: a missing file names the path and the OS error") {
  try {
    load_safetensors("/nonexistent/dir/w.safetensors");
    FAIL("expected IOError");
  } catch (const IOError& e) {
    std::string m = e.what();
    CHECK(m.find("/nonexistent/dir/w.safetensors") != std::string::npos);
    CHECK(m.find(std::strerror(ENOENT)) != std::string::npos);
  }
  TempDir dir;
  CHECK_THROWS_AS(load_safetensors(dir.path.string()), IOError);  // a directory
}

TEST_CASE("safetensors: every corruption throws IOError naming the file and the offset") {
  const std::string ok_entry = R"("a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const std::string data8 = f32_bytes({1, 2});
  // Sanity: the well-formed version of what the cases below break loads.
  CHECK(load_error(craft("{" + ok_entry + "}", data8)).empty());

  SUBCASE("short files and bad lengths") {
    expect_corrupt("", "8-byte header length");
    expect_corrupt("abc", "8-byte header length");
    expect_corrupt(craft("{}").substr(0, 7), "8-byte header length");
    std::string huge(8, '\0');
    uint64_t n = uint64_t(1) << 40;
    std::memcpy(huge.data(), &n, 8);
    expect_corrupt(huge + "{}", "limit");
    n = 1000;
    std::memcpy(huge.data(), &n, 8);
    expect_corrupt(huge + "{}", "runs past the end");
    expect_corrupt(std::string(8, '\0'), "header length is 0");
  }
  SUBCASE("header is not JSON, or does not start with '{'") {
    expect_corrupt(craft(" {}"), "must begin with '{'");
    expect_corrupt(craft("[1]"), "must begin with '{'");
    std::string m = load_error(craft("{\"x\":@}"));
    CHECK(m.find("not valid JSON") != std::string::npos);
    CHECK(m.find("offset 13") != std::string::npos);  // the '@': 8 + 5
    expect_corrupt(craft("{\"a\":{\"dtype\":\"F32\","), "not valid JSON");
    expect_corrupt(craft(std::string("{}\0\0\0\0\0\0", 8)), "not valid JSON");  // NUL padding
    expect_corrupt(craft("{\"a\xff\":1}"), "not valid JSON");                   // invalid UTF-8
    CHECK(load_error(craft("{}      ")).empty());                               // space padding is fine
  }
  SUBCASE("missing and ill-typed fields") {
    expect_corrupt(craft(R"({"a":{"dtype":"F32","data_offsets":[0,8]}})", data8), "missing field \"shape\"");
    expect_corrupt(craft(R"({"a":{"shape":[2],"data_offsets":[0,8]}})", data8), "missing field \"dtype\"");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2]}})", data8), "missing field \"data_offsets\"");
    expect_corrupt(craft(R"({"a":5})", data8), "expected an object");
    expect_corrupt(craft(R"({"a":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", data8), "must be a string");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":"2","data_offsets":[0,8]}})", data8), "must be an array");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8]}})", data8), "[begin, end]");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", data8), "[begin, end]");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,"8"]}})", data8), "[begin, end]");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", data8), "[begin, end]");
    expect_corrupt(craft(R"({"__metadata__":{"k":1}})"), "must be a string");
    expect_corrupt(craft(R"({"__metadata__":[]})"), "must be an object");
  }
  SUBCASE("unknown dtype") {
    expect_corrupt(craft(R"({"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}})", "ab"), "unknown");
    expect_corrupt(craft(R"({"a":{"dtype":"f32","shape":[2],"data_offsets":[0,8]}})", data8), "unknown");
  }
  SUBCASE("bad shapes") {
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", data8),
                   "not a non-negative integer");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", data8),
                   "not a non-negative integer");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", data8),
                   "not a non-negative integer");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[null],"data_offsets":[0,8]}})", data8),
                   "not a non-negative integer");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296,2],"data_offsets":[0,8]}})", data8),
                   "overflows");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[9223372036854775808],"data_offsets":[0,8]}})", data8),
                   "overflows");
    // A zero dim does not excuse an overflowing extent (strides would overflow).
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[0,4294967296,4294967296],"data_offsets":[0,0]}})"),
                   "overflows");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,8]}})", data8),
                   "byte count");
  }
  SUBCASE("data_offsets that do not match the dtype and shape, or leave the buffer") {
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", data8), "needs 12 bytes");
    expect_corrupt(craft(R"({"a":{"dtype":"F64","shape":[2],"data_offsets":[0,8]}})", data8), "needs 16 bytes");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", data8), "end before they begin");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", data8), "run past the end");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551608,0]}})", data8),
                   "end before they begin");
  }
  SUBCASE("overlaps, gaps and trailing bytes") {
    std::string two = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]})";
    std::string m = load_error(craft("{" + ok_entry + "," + two + "}", f32_bytes({1, 2, 3})));
    CHECK(m.find("overlaps") != std::string::npos);
    CHECK(m.find("bad.safetensors") != std::string::npos);
    // Two names for the same bytes (the aliasing trick) is an overlap too.
    expect_corrupt(craft("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8),
                   "overlaps");
    // An empty tensor inside another tensor's bytes.
    expect_corrupt(craft("{" + ok_entry + R"(,"b":{"dtype":"F32","shape":[0],"data_offsets":[4,4]}})", data8),
                   "overlaps");
    std::string gap = R"("b":{"dtype":"F32","shape":[2],"data_offsets":[12,20]})";
    m = load_error(craft("{" + ok_entry + "," + gap + "}", f32_bytes({1, 2, 3, 4, 5})));
    CHECK(m.find("gap") != std::string::npos);
    uint64_t n = ("{" + ok_entry + "," + gap + "}").size();
    CHECK(m.find("offset " + std::to_string(8 + n + 8)) != std::string::npos);  // where the gap starts
    expect_corrupt(craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", f32_bytes({1, 2, 3})), "gap");
    m = load_error(craft("{" + ok_entry + "}", data8 + "xyz"));
    CHECK(m.find("3 trailing bytes") != std::string::npos);
    CHECK(m.find("offset " + std::to_string(8 + ok_entry.size() + 2 + 8)) != std::string::npos);
    expect_corrupt(craft("{}", "x"), "trailing bytes");
  }
  SUBCASE("duplicate names") {
    std::string h = "{" + ok_entry + "," + ok_entry + "}";
    std::string m = load_error(craft(h, data8));
    CHECK(m.find("duplicate key \"a\"") != std::string::npos);
    // The offset is the second key's closing quote: '{' + entry + ',' + '"a' .
    CHECK(m.find("offset " + std::to_string(8 + 1 + ok_entry.size() + 1 + 2)) != std::string::npos);
    expect_corrupt(craft(R"({"__metadata__":{"k":"1","k":"2"}})"), "duplicate key \"k\"");
    expect_corrupt(craft(R"({"a":{"dtype":"F32","dtype":"F32","shape":[2],"data_offsets":[0,8]}})", data8),
                   "duplicate key \"dtype\"");
  }
  SUBCASE("bool bytes other than 0 and 1") {
    std::string h = R"({"m":{"dtype":"BOOL","shape":[3],"data_offsets":[0,3]}})";
    CHECK(load_error(craft(h, std::string("\1\0\1", 3))).empty());
    std::string m = load_error(craft(h, std::string("\1\7\1", 3)));
    CHECK(m.find("BOOL") != std::string::npos);
    CHECK(m.find("offset " + std::to_string(8 + h.size() + 1)) != std::string::npos);
  }
  SUBCASE("the same errors come from files, naming the path") {
    TempDir dir;
    std::string path = dir.file("bad.safetensors");
    write_bytes(path, craft("{" + ok_entry + "}", data8 + "xyz"));
    try {
      load_safetensors(path);
      FAIL("expected IOError");
    } catch (const IOError& e) {
      std::string m = e.what();
      CHECK(m.find(path) != std::string::npos);
      CHECK(m.find("offset") != std::string::npos);
      CHECK(m.find("trailing") != std::string::npos);
    }
  }
}

TEST_CASE("safetensors: unknown fields in an entry are ignored, as the reference reader does") {
  auto f = from_safetensors_bytes(
      craft(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"extra":{"x":[1]}}})", f32_bytes({1, 2})));
  REQUIRE(f.tensors.size() == 1);
  CHECK(f.tensors[0].second.to_vector<float>() == std::vector<float>{1, 2});
}

// A file with every dtype, a 0-d tensor, an empty one in the middle and metadata.
std::string sweep_file() {
  TensorMap in;
  for (DType dt : kAll) in.emplace_back(std::string(dtype_name(dt)), sample(dt, {3}));
  in.emplace_back("scalar", sample(kFloat64, {}));
  in.emplace_back("empty", sample(kFloat32, {0, 4}));
  in.emplace_back("last", sample(kInt32, {2}));
  return to_safetensors_bytes(in, {{"k", "v"}});
}

TEST_CASE("safetensors: every truncation of a valid file throws a clean IOError") {
  std::string full = sweep_file();
  REQUIRE(from_safetensors_bytes(full).tensors.size() == kNumDTypes + 3);
  for (std::size_t len = 0; len < full.size(); ++len) {
    std::string m = load_error(full.substr(0, len), "bad.safetensors");
    INFO("prefix of ", len, " bytes: ", m);
    CHECK(m.find("bad.safetensors") != std::string::npos);
    CHECK(m.find("offset") != std::string::npos);
  }
  // And through the file reader (which reads in one pass).
  TempDir dir;
  std::string path = dir.file("bad.safetensors");
  for (std::size_t len = 0; len < full.size(); len += 7) {
    write_bytes(path, full.substr(0, len));
    CHECK_THROWS_AS(load_safetensors(path), IOError);
  }
  write_bytes(path, full);
  CHECK(load_safetensors(path).tensors.size() == kNumDTypes + 3);
}

TEST_CASE("safetensors: random byte mutations load or throw snug::Error, never crash") {
  std::string full = sweep_file();
  std::mt19937_64 rng(20240611);
  int loaded = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::string b = full;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) {
      std::size_t at = rng() % b.size();
      if (rng() % 2)
        b[at] = static_cast<char>(b[at] ^ (1 << (rng() % 8)));  // flip a bit
      else
        b[at] = static_cast<char>(rng());  // replace a byte
    }
    try {
      auto f = from_safetensors_bytes(b, "mutant");
      for (const auto& [name, t] : f.tensors) (void)bytes_of(t);  // touch every byte
      ++loaded;
    } catch (const Error& e) {
      ++rejected;
    } catch (const std::exception& e) {
      FAIL_CHECK("mutation ", iter, " threw a non-snug exception: ", e.what());
    }
  }
  MESSAGE("byte mutations: ", loaded, " loaded, ", rejected, " rejected");
  CHECK(rejected > 0);
  CHECK(loaded > 0);
}

// ============================================================================
// Interop with the reference Python package
// ============================================================================

TEST_CASE("safetensors: reads the Python fixture, bit for bit") {
  auto f = load_safetensors(fixture_path());
  CHECK(f.metadata == std::map<std::string, std::string>{{"format", "pt"}, {"source", "make_safetensors_fixture.py"}});
  const TensorMap& m = f.tensors;
  CHECK(m.size() == 7);

  const Tensor& f32 = find(m, "f32");
  CHECK(f32.dtype() == kFloat32);
  CHECK(f32.shape() == Shape{2, 3});
  CHECK(raw_values<uint32_t>(f32) == bits_of<uint32_t>({0.0f, 1.5f, -2.25f, 1e-3f, 3.0e38f, -0.0f}));

  const Tensor& f16 = find(m, "f16");
  CHECK(f16.dtype() == kFloat16);
  CHECK(f16.shape() == Shape{4});
  CHECK(raw_values<uint16_t>(f16) == std::vector<uint16_t>{0x3C00, 0xB800, 0x7BFF, 0x0001});

  const Tensor& bf16 = find(m, "bf16");
  CHECK(bf16.dtype() == kBFloat16);
  CHECK(raw_values<uint16_t>(bf16) == std::vector<uint16_t>{0x3F80, 0xC000, 0x3E20, 0x7F62});

  const Tensor& i64 = find(m, "i64");
  CHECK(i64.dtype() == kInt64);
  CHECK(raw_values<int64_t>(i64) == std::vector<int64_t>{-1, int64_t(1) << 40, -(int64_t(1) << 62)});

  const Tensor& b = find(m, "bool");
  CHECK(b.dtype() == kBool);
  CHECK(raw_values<uint8_t>(b) == std::vector<uint8_t>{1, 0, 1});

  const Tensor& scalar = find(m, "scalar");
  CHECK(scalar.dim() == 0);
  CHECK(scalar.item<float>() == 3.5f);

  const Tensor& empty_t = find(m, "empty");
  CHECK(empty_t.shape() == Shape{0, 3});
  CHECK(empty_t.dtype() == kFloat32);

  // snug writes back what it read; the reference reader's order (by dtype
  // size) is kept as the header order.
  auto again = from_safetensors_bytes(to_safetensors_bytes(m, f.metadata));
  for (std::size_t i = 0; i < m.size(); ++i) {
    CHECK(again.tensors[i].first == m[i].first);
    check_same(again.tensors[i].second, m[i].second);
  }
}

TEST_CASE("safetensors: snug-written interop file (checked by make_safetensors_fixture.py --check)") {
  auto vec = [](auto... v) { return std::vector<double>{static_cast<double>(v)...}; };
  TensorMap out{
      {"f32", from_vector<double>(vec(0.0, 1.5, -2.25, 1e-3, 3.0e38, -0.0), {2, 3}, kFloat32)},
      {"f16", from_vector<double>(vec(1.0, -0.5, 65504.0, std::ldexp(1.0, -24)), {4}, kFloat16)},
      {"f64", from_vector<double>(vec(3.141592653589793, -1e300), {2}, kFloat64)},
      {"i8", from_vector<double>(vec(-128, 127, 0), {3}, kInt8)},
      {"u8", from_vector<double>(vec(0, 255, 7), {3}, kUInt8)},
      {"i32", from_vector<double>(vec(-2147483648.0, 2147483647.0), {2}, kInt32)},
      {"i64", from_vector<int64_t>({-1, int64_t(1) << 40, -(int64_t(1) << 62)}, {3})},
      {"bool", from_vector<double>(vec(1, 0, 1), {3}, kBool)},
      {"scalar", scalar_tensor(3.5)},
      {"empty", zeros({0, 3})},
      {"transposed", raw::transpose(raw::view(arange(6, kFloat32), {2, 3}), 0, 1)},
      {"bf16", from_vector<double>(vec(1.0, -2.0, 0.15625, 3.0e38), {4}, kBFloat16)},
  };
  std::map<std::string, std::string> meta{{"writer", "snug"}, {"note", "interop check"}};
  TempDir dir;
  const char* env = std::getenv("SNUG_INTEROP_OUT");
  std::string path = env ? std::string(env) : dir.file("snug_written.safetensors");
  save_safetensors(path, out, meta);
  if (env) MESSAGE("wrote ", path, "; check it with: python tests/data/make_safetensors_fixture.py --check ", path);
  auto back = load_safetensors(path);
  CHECK(back.metadata == meta);
  REQUIRE(back.tensors.size() == out.size());
  for (std::size_t i = 0; i < out.size(); ++i) check_same(back.tensors[i].second, raw::contiguous(out[i].second));
  CHECK(raw_values<uint16_t>(find(back.tensors, "bf16")) == std::vector<uint16_t>{0x3F80, 0xC000, 0x3E20, 0x7F62});
}
