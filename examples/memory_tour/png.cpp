// SPDX-License-Identifier: MIT
// A minimal PNG writer: 8-bit RGB, no interlacing, filter 0 ("none") on every
// row. snug has no image library and needs none for one chart; the format is
// three chunks (IHDR, IDAT, IEND), each with a big-endian length and a CRC32.
// The pixel data is a zlib stream, and zlib is already a dependency of snug
// (data/file_bytes.cpp reads gzip files with it), so it compresses the rows
// and computes the CRCs; a chart of flat colours shrinks to a few kilobytes.
#include <cstdio>
#include <fstream>

#include <zlib.h>

#include <snug/base/error.h>

#include "memory_tour/tour.h"

namespace memory_tour {

using namespace snug;

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {  // PNG's integers are big-endian
  for (int s = 24; s >= 0; s -= 8) out.push_back(uint8_t(v >> s));
}

// length, type, data, CRC32 of type + data
void chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, uint32_t(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  const uLong crc = crc32(crc32(0L, Z_NULL, 0), out.data() + start, uInt(out.size() - start));
  put_u32(out, uint32_t(crc));
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& img) {
  SNUG_CHECK(img.width > 0 && img.height > 0 && img.rgb.size() == size_t(img.width) * size_t(img.height) * 3,
             ValueError, "encode_png: an image of ", img.width, " x ", img.height, " needs ",
             size_t(img.width) * size_t(img.height) * 3, " bytes, got ", img.rgb.size());
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> ihdr;
  put_u32(ihdr, uint32_t(img.width));
  put_u32(ihdr, uint32_t(img.height));
  ihdr.insert(ihdr.end(), {8, 2, 0, 0, 0});  // bit depth 8, colour type 2 (RGB), deflate, filter set 0, no interlace
  chunk(out, "IHDR", ihdr);

  // Each row is preceded by its filter type byte (0: the bytes as they are).
  const size_t row = size_t(img.width) * 3;
  std::vector<uint8_t> raw;
  raw.reserve((row + 1) * size_t(img.height));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    raw.insert(raw.end(), img.rgb.begin() + std::ptrdiff_t(row * size_t(y)), img.rgb.begin() + std::ptrdiff_t(row * size_t(y + 1)));
  }
  uLongf n = compressBound(uLong(raw.size()));
  std::vector<uint8_t> z(n);
  SNUG_CHECK(compress2(z.data(), &n, raw.data(), uLong(raw.size()), 9) == Z_OK, ValueError,
             "encode_png: zlib could not compress ", raw.size(), " bytes");
  z.resize(n);
  chunk(out, "IDAT", z);
  chunk(out, "IEND", {});
  return out;
}

void write_png(const Image& img, const std::string& path) {
  const std::vector<uint8_t> bytes = encode_png(img);
  std::ofstream f(path, std::ios::binary);
  SNUG_CHECK(f.good(), IOError, "memory_tour: cannot write the chart to \"", path, "\"");
  f.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
  SNUG_CHECK(f.good(), IOError, "memory_tour: writing \"", path, "\" failed");
}

}  // namespace memory_tour
