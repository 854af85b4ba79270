// SPDX-License-Identifier: MIT
// safetensors reader and writer. The reader treats every file as hostile: each
// number in the header is checked before it is used, and every problem throws
// IOError naming the file and a byte offset (docs/serialization.md lists the
// checks). The writer produces what the reference implementation produces: an
// 8-byte little-endian header length, a JSON header padded with spaces to a
// multiple of 8 bytes, then the tensors' bytes back to back.
#include <snug/core/safetensors.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <unordered_map>
#include <unordered_set>

#include <snug/base/error.h>
#include <snug/core/raw_ops.h>

namespace snug {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; a big-endian host needs byte swapping here");

namespace {

using json = nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we, before
// allocating anything of that size.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

struct DTypeName {
  DType dtype;
  const char* name;
};
constexpr DTypeName kDTypeNames[] = {
    {DType::f32, "F32"}, {DType::f16, "F16"}, {DType::bf16, "BF16"}, {DType::f64, "F64"}, {DType::i8, "I8"},
    {DType::u8, "U8"},   {DType::i32, "I32"}, {DType::i64, "I64"},   {DType::b8, "BOOL"},
};
static_assert(std::size(kDTypeNames) == kNumDTypes, "every snug dtype needs a safetensors name");

std::string quoted(const std::string& s) { return str('"', s, '"'); }

// ============================================================================
// Reading
// ============================================================================

[[noreturn]] void corrupt(const std::string& file, uint64_t offset, const std::string& what) {
  throw IOError(str("safetensors file ", quoted(file), ", byte offset ", offset, ": ", what));
}

// One tensor's header entry, checked.
struct Entry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // relative to the data buffer
  uint64_t key_offset = 0;      // file offset of the entry's key, for messages
  uint64_t offsets_offset = 0;  // file offset of its "data_offsets" key
};

struct Header {
  std::vector<Entry> entries;  // header order
  std::map<std::string, std::string> metadata;
  uint64_t data_start = 0;  // file offset of the data buffer (8 + N)
  uint64_t data_size = 0;   // bytes in the data buffer
};

// An iterator over the header bytes that records how many bytes the JSON
// parser has consumed, so a key event can be given its file offset.
struct CountingIter {
  using iterator_category = std::forward_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  const char* p = nullptr;
  const char* base = nullptr;
  std::size_t* consumed = nullptr;
  reference operator*() const { return *p; }
  CountingIter& operator++() {
    ++p;
    *consumed = static_cast<std::size_t>(p - base);
    return *this;
  }
  CountingIter operator++(int) {
    CountingIter old = *this;
    ++*this;
    return old;
  }
  bool operator==(const CountingIter& o) const { return p == o.p; }
};

// Parses the JSON header (bytes [8, 8 + n) of the file), refusing duplicate
// keys in any object, and records where each tensor's keys end in the file.
// nlohmann's DOM silently keeps the last of duplicate keys; the spec forbids
// them, and letting one through would let two readers see different tensors.
struct ParsedJson {
  json root;
  std::vector<std::string> top_keys;                      // header order
  std::unordered_map<std::string, uint64_t> key_offsets;  // "name" or "name\0field" -> offset
};

ParsedJson parse_json(const char* text, uint64_t n, const std::string& file) {
  constexpr uint64_t kBase = 8;  // the header starts after the length field
  ParsedJson out;
  std::size_t consumed = 0;
  std::vector<std::unordered_set<std::string>> seen;  // one set per open object
  std::string current_top;                            // key of the open depth-1 value
  auto cb = [&](int depth, json::parse_event_t event, json& parsed) -> bool {
    switch (event) {
      case json::parse_event_t::object_start:
        seen.emplace_back();
        break;
      case json::parse_event_t::object_end:
        if (!seen.empty()) seen.pop_back();
        break;
      case json::parse_event_t::key: {
        const std::string& k = parsed.get_ref<const std::string&>();
        // The key's closing quote is the last byte consumed.
        uint64_t at = kBase + (consumed ? consumed - 1 : 0);
        if (!seen.empty() && !seen.back().insert(k).second)
          corrupt(file, at, str("duplicate key ", quoted(k), " in the JSON header (the format forbids duplicates)"));
        if (depth == 1) {
          current_top = k;
          out.top_keys.push_back(k);
          out.key_offsets[k] = at;
        } else if (depth == 2) {
          out.key_offsets[current_top + '\0' + k] = at;
        }
        break;
      }
      default:
        break;
    }
    return true;
  };
  CountingIter first{text, text, &consumed};
  CountingIter last{text + n, text, &consumed};
  try {
    out.root = json::parse(first, last, cb, /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::parse_error& e) {
    // e.byte counts the bytes read, 1-based: the bad byte is at e.byte - 1.
    uint64_t at = kBase + (e.byte ? e.byte - 1 : 0);
    corrupt(file, at, str("the header is not valid JSON (", e.what(), ")"));
  } catch (const json::exception& e) {
    corrupt(file, kBase, str("the header could not be parsed (", e.what(), ")"));
  }
  return out;
}

// A non-negative JSON integer that fits int64, or nullopt-like false.
bool as_index(const json& v, uint64_t* out) {
  if (!v.is_number_unsigned()) {
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      *out = static_cast<uint64_t>(v.get<int64_t>());
      return true;
    }
    return false;
  }
  *out = v.get<uint64_t>();
  return true;
}

std::string describe(const json& v) {
  std::string s = v.dump();
  if (s.size() > 60) s = s.substr(0, 57) + "...";
  return s;
}

Entry parse_entry(const std::string& name, const json& v, const ParsedJson& pj, const Header& h,
                  const std::string& file) {
  Entry e;
  e.name = name;
  e.key_offset = pj.key_offsets.at(name);
  auto field_offset = [&](const char* field) {
    auto it = pj.key_offsets.find(name + '\0' + field);
    return it == pj.key_offsets.end() ? e.key_offset : it->second;
  };
  const std::string who = str("tensor ", quoted(name));
  if (!v.is_object())
    corrupt(file, e.key_offset,
            str(who, ": expected an object with \"dtype\", \"shape\" and \"data_offsets\", got ", describe(v)));
  for (const char* field : {"dtype", "shape", "data_offsets"})
    if (!v.contains(field)) corrupt(file, e.key_offset, str(who, ": missing field \"", field, "\""));

  // dtype
  const json& dt = v.at("dtype");
  uint64_t at = field_offset("dtype");
  if (!dt.is_string()) corrupt(file, at, str(who, ": \"dtype\" must be a string, got ", describe(dt)));
  if (!safetensors_dtype_from_name(dt.get_ref<const std::string&>(), &e.dtype))
    corrupt(file, at,
            str(who, ": unknown or unsupported dtype ", describe(dt),
                " (snug reads F32, F16, BF16, F64, I8, U8, I32, I64, BOOL)"));

  // shape: non-negative integers whose extent fits int64 (the product of the
  // nonzero dims is bounded too, so strides cannot overflow either).
  const json& sh = v.at("shape");
  at = field_offset("shape");
  if (!sh.is_array()) corrupt(file, at, str(who, ": \"shape\" must be an array, got ", describe(sh)));
  uint64_t numel = 1, extent = 1;
  for (const json& d : sh) {
    uint64_t dim = 0;
    if (!as_index(d, &dim))
      corrupt(file, at, str(who, ": shape entry ", describe(d), " is not a non-negative integer"));
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        __builtin_mul_overflow(extent, std::max<uint64_t>(dim, 1), &extent) ||
        extent > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      corrupt(file, at, str(who, ": shape ", describe(sh), " overflows a 64-bit element count"));
    numel *= dim;  // <= extent, cannot overflow
    e.shape.push_back(static_cast<int64_t>(dim));
  }
  uint64_t nbytes = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(e.dtype)), &nbytes))
    corrupt(file, at,
            str(who, ": shape ", describe(sh), " times the ", dt.get<std::string>(),
                " element size overflows a 64-bit byte count"));

  // data_offsets: [begin, end] within the data buffer, matching the size.
  const json& off = v.at("data_offsets");
  at = field_offset("data_offsets");
  e.offsets_offset = at;
  if (!off.is_array() || off.size() != 2 || !as_index(off[0], &e.begin) || !as_index(off[1], &e.end))
    corrupt(file, at,
            str(who, ": \"data_offsets\" must be [begin, end] with non-negative integers, got ", describe(off)));
  if (e.begin > e.end) corrupt(file, at, str(who, ": data_offsets [", e.begin, ", ", e.end, "] end before they begin"));
  if (e.end - e.begin != nbytes)
    corrupt(file, at,
            str(who, ": data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin, " bytes, but dtype ",
                dt.get<std::string>(), " x shape ", describe(sh), " needs ", nbytes, " bytes"));
  if (e.end > h.data_size)
    corrupt(file, at,
            str(who, ": data_offsets [", e.begin, ", ", e.end, "] run past the end of the ", h.data_size,
                "-byte data buffer (which starts at byte ", h.data_start, "; the file may be truncated)"));
  return e;
}

// Checks the 8-byte length field and parses and checks the header.
// `head` is the whole header (n bytes); `file_size` the size of the whole file.
Header parse_header(const char* head, uint64_t n, uint64_t file_size, const std::string& file) {
  Header h;
  h.data_start = 8 + n;
  h.data_size = file_size - h.data_start;  // callers checked 8 + n <= file_size
  if (n == 0) corrupt(file, 0, "the header length is 0; the JSON header must be at least \"{}\"");
  if (head[0] != '{')
    corrupt(
        file, 8,
        str("the JSON header must begin with '{', found byte ", static_cast<int>(static_cast<unsigned char>(head[0]))));
  // nlohmann's lexer takes a NUL byte for the end of input, so "{}\0junk"
  // would parse; no valid JSON text contains a raw NUL, so refuse it here.
  if (const void* nul = std::memchr(head, 0, n))
    corrupt(file, 8 + static_cast<uint64_t>(static_cast<const char*>(nul) - head),
            "the header is not valid JSON (NUL byte; pad the header with spaces)");
  ParsedJson pj = parse_json(head, n, file);
  if (!pj.root.is_object()) corrupt(file, 8, "the JSON header must be an object");

  std::unordered_map<std::string, std::size_t> index;
  for (const std::string& key : pj.top_keys) {
    const json& v = pj.root.at(key);
    if (key == kMetadataKey) {
      uint64_t at = pj.key_offsets.at(key);
      if (v.is_null()) continue;  // some writers emit "__metadata__": null
      if (!v.is_object()) corrupt(file, at, str("\"__metadata__\" must be an object of strings, got ", describe(v)));
      for (const auto& [mk, mv] : v.items()) {
        if (!mv.is_string()) {
          auto it = pj.key_offsets.find(key + '\0' + mk);
          corrupt(file, it == pj.key_offsets.end() ? at : it->second,
                  str("\"__metadata__\" value for ", quoted(mk), " must be a string, got ", describe(mv)));
        }
        h.metadata[mk] = mv.get<std::string>();
      }
      continue;
    }
    index[key] = h.entries.size();
    h.entries.push_back(parse_entry(key, v, pj, h, file));
  }

  // The tensors must tile the data buffer exactly: no overlap (two names for
  // the same bytes), no gap, nothing after the last tensor.
  std::vector<const Entry*> by_offset;
  for (const Entry& e : h.entries) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const Entry* a, const Entry* b) {
    return a->begin != b->begin ? a->begin < b->begin : a->end < b->end;
  });
  uint64_t covered = 0;
  const Entry* prev = nullptr;
  for (const Entry* e : by_offset) {
    if (e->begin < covered)
      corrupt(file, h.data_start + e->begin,
              str("tensor ", quoted(e->name), " (data_offsets [", e->begin, ", ", e->end, "]) overlaps tensor ",
                  quoted(prev->name), " (data_offsets [", prev->begin, ", ", prev->end, "])"));
    if (e->begin > covered)
      corrupt(file, h.data_start + covered,
              str("gap in the data buffer: bytes [", covered, ", ", e->begin, ") belong to no tensor (next is ",
                  quoted(e->name), "); the format requires the buffer to be fully covered"));
    covered = e->end;
    prev = e;
  }
  if (covered != h.data_size)
    corrupt(file, h.data_start + covered,
            str(h.data_size - covered, " trailing bytes after the last tensor's data (the tensors cover ", covered,
                " of the ", h.data_size, " data bytes)"));
  return h;
}

uint64_t read_le64(const char* p) {
  uint64_t v = 0;
  std::memcpy(&v, p, 8);  // little-endian host (static_assert above)
  return v;
}

// Checks the length field against the file size; returns the header length.
uint64_t check_length(const char* first8, uint64_t file_size, const std::string& file) {
  uint64_t n = read_le64(first8);
  if (n > kMaxHeaderBytes)
    corrupt(file, 0,
            str("header length ", n, " is larger than the ", kMaxHeaderBytes,
                "-byte limit (not a safetensors file, or a corrupt one)"));
  if (8 + n > file_size)
    corrupt(file, 0,
            str("header length ", n, " runs past the end of the ", file_size,
                "-byte file (truncated or not a safetensors file)"));
  return n;
}

void check_short(uint64_t size, const std::string& file) {
  if (size < 8)
    corrupt(file, 0, str("the file is ", size, " bytes; a safetensors file starts with an 8-byte header length"));
}

// Allocates every tensor and fills it with read(file_offset, dst, nbytes),
// visiting the data in file order (one sequential pass).
template <class ReadFn>
TensorMap load_entries(const Header& h, Device device, const std::string& file, ReadFn&& read) {
  std::vector<std::size_t> order(h.entries.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](std::size_t a, std::size_t b) { return h.entries[a].begin < h.entries[b].begin; });
  // Host devices (cpu, cpu:N) are filled in place; others go through the CPU.
  Device host = device.is_cpu() ? device : kCPU;
  std::vector<Tensor> loaded(h.entries.size());
  for (std::size_t i : order) {
    const Entry& e = h.entries[i];
    Tensor t = empty(e.shape, TensorOptions(e.dtype, host));
    uint64_t nbytes = e.end - e.begin;
    if (nbytes) read(h.data_start + e.begin, t.data_ptr(), nbytes);
    if (e.dtype == DType::b8) {
      // Any byte but 0 or 1 is not a bool; reading it as one is undefined.
      const auto* p = static_cast<const unsigned char*>(t.data_ptr());
      for (uint64_t k = 0; k < nbytes; ++k)
        if (p[k] > 1)
          corrupt(file, h.data_start + e.begin + k,
                  str("tensor ", quoted(e.name), " has dtype BOOL but holds byte ", static_cast<int>(p[k]),
                      " (only 0 and 1 are bools)"));
    }
    loaded[i] = host == device ? t : raw::to_device(t, device);
  }
  TensorMap out;
  out.reserve(loaded.size());
  for (std::size_t i = 0; i < loaded.size(); ++i) out.emplace_back(h.entries[i].name, std::move(loaded[i]));
  return out;
}

// A file descriptor closed on scope exit.
struct Fd {
  int fd = -1;
  explicit Fd(int f) : fd(f) {}
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
};

// Reads exactly n bytes at the current position; a short read means the file
// shrank while we read it.
void read_exact(int fd, void* dst, uint64_t n, uint64_t at, const std::string& file) {
  auto* p = static_cast<char*>(dst);
  uint64_t done = 0;
  while (done < n) {
    ssize_t r = ::read(fd, p + done, static_cast<std::size_t>(std::min<uint64_t>(n - done, 1u << 30)));
    if (r < 0) {
      if (errno == EINTR) continue;
      corrupt(file, at + done, str("read failed: ", std::strerror(errno)));
    }
    if (r == 0) corrupt(file, at + done, "unexpected end of file (did the file shrink while it was read?)");
    done += static_cast<uint64_t>(r);
  }
}

// ============================================================================
// Writing
// ============================================================================

std::string json_string(const std::string& s, const char* what) {
  try {
    return json(s).dump();
  } catch (const json::exception&) {
    throw ValueError(str("save_safetensors: ", what, " ", quoted(s), " is not valid UTF-8 (JSON needs UTF-8)"));
  }
}

// The header (length field included) for `tensors`, data laid out back to back
// in map order. Validates the arguments.
std::string make_header(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string> names;
  std::string j = "{";
  if (!metadata.empty()) {
    j += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [k, v] : metadata) {
      if (!first) j += ',';
      first = false;
      j += json_string(k, "metadata key");
      j += ':';
      j += json_string(v, "metadata value");
    }
    j += '}';
  }
  uint64_t offset = 0;
  bool first = metadata.empty();
  for (const auto& [name, t] : tensors) {
    SNUG_CHECK(t.defined(), ValueError, "save_safetensors: tensor ", quoted(name), " is undefined");
    SNUG_CHECK(name != kMetadataKey, ValueError,
               "save_safetensors: \"__metadata__\" is reserved for metadata and cannot name a tensor");
    SNUG_CHECK(names.insert(name).second, ValueError, "save_safetensors: duplicate tensor name ", quoted(name));
    if (!first) j += ',';
    first = false;
    uint64_t nbytes = t.nbytes();
    j += json_string(name, "tensor name");
    j += str(":{\"dtype\":\"", safetensors_dtype_name(t.dtype()), "\",\"shape\":[");
    for (std::size_t d = 0; d < t.shape().size(); ++d) j += str(d ? "," : "", t.shape()[d]);
    j += str("],\"data_offsets\":[", offset, ",", offset + nbytes, "]}");
    offset += nbytes;
  }
  j += '}';
  // Pad with spaces so the data buffer starts 8-byte aligned, as the reference
  // writer does.
  while (j.size() % 8 != 0) j += ' ';
  SNUG_CHECK(j.size() <= kMaxHeaderBytes, ValueError, "save_safetensors: the header would be ", j.size(),
             " bytes, over the ", kMaxHeaderBytes, "-byte limit readers enforce");
  uint64_t n = j.size();
  std::string out(8, '\0');
  std::memcpy(out.data(), &n, 8);  // little-endian host
  return out + j;
}

// t as contiguous bytes in host memory (a copy only when needed).
Tensor host_contiguous(const Tensor& t) { return t.device().is_cpu() ? raw::contiguous(t) : raw::to_device(t, kCPU); }

[[noreturn]] void os_error(const std::string& what, const std::string& path, int err) {
  throw IOError(str("save_safetensors: ", what, " ", quoted(path), ": ", std::strerror(err)));
}

void write_all(int fd, const void* src, std::size_t n, const std::string& tmp) {
  const auto* p = static_cast<const char*>(src);
  while (n) {
    ssize_t w = ::write(fd, p, std::min<std::size_t>(n, 1u << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      os_error("cannot write", tmp, errno);
    }
    p += w;
    n -= static_cast<std::size_t>(w);
  }
}

// Removes the temporary file unless the write was committed.
struct TempFile {
  std::string path;
  int fd = -1;
  bool committed = false;
  ~TempFile() {
    if (fd >= 0) ::close(fd);
    if (!committed) ::unlink(path.c_str());
  }
};

// NOTE [ Orphaned temporary files ]
// A process killed inside save_safetensors leaves "<path>.tmp-<pid>-<n>" behind:
// the target itself is intact (it is only ever replaced by rename), but a run
// that saves every few minutes and is killed now and then would slowly fill the
// disk. After each successful save we remove the temporaries of the same target
// whose writer process no longer exists (kill(pid, 0) fails with ESRCH). A
// temporary of a live process -- another process saving the same path right now
// -- is left alone. Best effort: the save has already succeeded, so a failure
// here is ignored. Limitation: a writer in another PID namespace sharing the
// directory looks dead to us; its rename would then fail with a clear IOError
// rather than corrupt anything.
void remove_orphan_temps(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path target(path);
  fs::path dir = target.parent_path();
  if (dir.empty()) dir = ".";
  const std::string prefix = target.filename().string() + ".tmp-";
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    std::string name = it->path().filename().string();
    if (name.size() <= prefix.size() || name.compare(0, prefix.size(), prefix) != 0) continue;
    // The rest must be "<pid>-<n>", both decimal.
    std::string rest = name.substr(prefix.size());
    size_t dash = rest.find('-');
    if (dash == 0 || dash == std::string::npos || dash + 1 == rest.size()) continue;
    bool digits = std::all_of(rest.begin(), rest.end(), [](char c) { return (c >= '0' && c <= '9') || c == '-'; });
    if (!digits || rest.find('-', dash + 1) != std::string::npos || dash > 9) continue;
    pid_t pid = static_cast<pid_t>(std::stol(rest.substr(0, dash)));
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to judge)
    fs::remove(it->path(), ec);
  }
}

}  // namespace

// ============================================================================
// Public API
// ============================================================================

const char* safetensors_dtype_name(DType d) {
  for (const auto& dn : kDTypeNames)
    if (dn.dtype == d) return dn.name;
  throw DTypeError(str("safetensors: dtype ", dtype_name(d), " has no safetensors name"));
}

bool safetensors_dtype_from_name(const std::string& name, DType* out) {
  for (const auto& dn : kDTypeNames)
    if (name == dn.name) {
      *out = dn.dtype;
      return true;
    }
  return false;
}

std::string to_safetensors_bytes(const TensorMap& tensors, const std::map<std::string, std::string>& metadata) {
  std::string out = make_header(tensors, metadata);
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() == 0) continue;
    Tensor c = host_contiguous(t);
    out.append(static_cast<const char*>(c.data_ptr()), c.nbytes());
  }
  return out;
}

SafetensorsFile from_safetensors_bytes(const std::string& bytes, const std::string& name, Device device) {
  check_short(bytes.size(), name);
  uint64_t n = check_length(bytes.data(), bytes.size(), name);
  Header h = parse_header(bytes.data() + 8, n, bytes.size(), name);
  SafetensorsFile f;
  f.tensors = load_entries(h, device, name, [&](uint64_t at, void* dst, uint64_t nb) {
    std::memcpy(dst, bytes.data() + at, nb);  // in range: parse_header checked it
  });
  f.metadata = std::move(h.metadata);
  return f;
}

SafetensorsFile load_safetensors(const std::string& path, Device device) {
  Fd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.fd < 0) throw IOError(str("load_safetensors: cannot open ", quoted(path), ": ", std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0)
    throw IOError(str("load_safetensors: cannot stat ", quoted(path), ": ", std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw IOError(str("load_safetensors: ", quoted(path), " is not a regular file"));
  uint64_t size = static_cast<uint64_t>(st.st_size);
  check_short(size, path);
  char first8[8];
  read_exact(fd.fd, first8, 8, 0, path);
  uint64_t n = check_length(first8, size, path);
  std::string head(n, '\0');
  read_exact(fd.fd, head.data(), n, 8, path);
  Header h = parse_header(head.data(), n, size, path);
  SafetensorsFile f;
  // The tensors tile the buffer (parse_header checked), so reading them in
  // offset order is one sequential pass with no seeks.
  f.tensors =
      load_entries(h, device, path, [&](uint64_t at, void* dst, uint64_t nb) { read_exact(fd.fd, dst, nb, at, path); });
  f.metadata = std::move(h.metadata);
  return f;
}

void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata) {
  std::string header = make_header(tensors, metadata);  // validates before touching the disk

  static std::atomic<uint64_t> counter{0};
  TempFile tmp;
  tmp.path = str(path, ".tmp-", ::getpid(), "-", counter.fetch_add(1));
  tmp.fd = ::open(tmp.path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (tmp.fd < 0) {
    int err = errno;
    tmp.committed = true;  // nothing was created; do not unlink someone else's file
    os_error("cannot create temporary file", tmp.path, err);
  }
  write_all(tmp.fd, header.data(), header.size(), tmp.path);
  for (const auto& [name, t] : tensors) {
    if (t.nbytes() == 0) continue;
    Tensor c = host_contiguous(t);  // one tensor at a time: bounded extra memory
    write_all(tmp.fd, c.data_ptr(), c.nbytes(), tmp.path);
  }
  if (::fsync(tmp.fd) != 0) os_error("cannot fsync", tmp.path, errno);
  int fd = tmp.fd;
  tmp.fd = -1;
  if (::close(fd) != 0) os_error("cannot close", tmp.path, errno);
  if (::rename(tmp.path.c_str(), path.c_str()) != 0) {
    int err = errno;
    throw IOError(
        str("save_safetensors: cannot rename ", quoted(tmp.path), " to ", quoted(path), ": ", std::strerror(err)));
  }
  tmp.committed = true;

  // Make the rename itself durable.
  std::string dir = std::filesystem::path(path).parent_path().string();
  if (dir.empty()) dir = ".";
  Fd dfd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dfd.fd < 0) os_error("wrote the file but cannot open its directory", dir, errno);
  // Some filesystems cannot fsync a directory (EINVAL); nothing more to do there.
  if (::fsync(dfd.fd) != 0 && errno != EINVAL) os_error("wrote the file but cannot fsync its directory", dir, errno);
  remove_orphan_temps(path);
}

}  // namespace snug
