// SPDX-License-Identifier: MIT
#include <snug/data/file_bytes.h>

#include <zlib.h>

#include <filesystem>

#include <snug/base/error.h>

namespace snug::data {

std::vector<uint8_t> read_file_bytes(const std::string& path) {
  SNUG_CHECK(std::filesystem::is_regular_file(path), IOError, path, ": no such file");
  gzFile f = gzopen(path.c_str(), "rb");
  SNUG_CHECK(f != nullptr, IOError, path, ": cannot open (offset 0)");
  std::vector<uint8_t> buf;
  std::vector<uint8_t> chunk(1 << 20);
  for (;;) {
    int n = gzread(f, chunk.data(), static_cast<unsigned>(chunk.size()));
    if (n < 0) {
      int code = 0;
      std::string why = gzerror(f, &code);
      gzclose(f);
      throw IOError(
          str(path, ": corrupt compressed data after decompressed offset ", buf.size(), " (zlib: ", why, ")"));
    }
    if (n == 0) break;
    buf.insert(buf.end(), chunk.begin(), chunk.begin() + n);
  }
  // A gzip stream cut short ends without an error from gzread on some zlib
  // versions; gzerror still says so.
  int code = 0;
  const char* why = gzerror(f, &code);
  std::string msg = why ? why : "";
  gzclose(f);
  SNUG_CHECK(code == Z_OK || code == Z_STREAM_END, IOError, path,
             ": truncated or corrupt compressed data at decompressed offset ", buf.size(), " (zlib: ", msg, ")");
  return buf;
}

}  // namespace snug::data
