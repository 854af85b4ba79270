// SPDX-License-Identifier: MIT
// The picture maker of picture.h: an RGB image with rectangles and 5x7
// bitmap text, a PNG writer (zlib), and the grouped bar chart drawn with them.
#include "common/picture.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <fstream>
#include <stdexcept>
#include <string>

#include <zlib.h>

namespace picture {
namespace {

// ---------------------------------------------------------------------------
// The font

constexpr int kGlyphW = 5, kGlyphH = 7;
constexpr int kAdvance = kGlyphW + 1;  // one blank column between glyphs

// One glyph per printable ASCII character, ' ' (32) to '~' (126). Each glyph
// is 7 rows, top first; bit 4 of a row is its leftmost pixel, bit 0 its
// rightmost. 'A', for instance, is
//   .###.  0x0e
//   #...#  0x11
//   #...#  0x11
//   #####  0x1f
//   #...#  0x11
//   #...#  0x11
//   #...#  0x11
// Capitals and digits use all 7 rows; lowercase letters stand 5 rows tall
// (rows 2-6) with ascenders reaching row 0. There is no row below the
// baseline, so g, j, p, q and y squeeze their bodies into rows 2-4 and their
// tails into rows 5-6: their tops line up with the other lowercase letters,
// which is what the eye goes by.
constexpr uint8_t kFont[95][kGlyphH] = {
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},  // space
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x00, 0x04},  // !
    {0x0a, 0x0a, 0x0a, 0x00, 0x00, 0x00, 0x00},  // "
    {0x0a, 0x0a, 0x1f, 0x0a, 0x1f, 0x0a, 0x0a},  // #
    {0x04, 0x0f, 0x14, 0x0e, 0x05, 0x1e, 0x04},  // $
    {0x18, 0x19, 0x02, 0x04, 0x08, 0x13, 0x03},  // %
    {0x0c, 0x12, 0x14, 0x08, 0x15, 0x12, 0x0d},  // &
    {0x04, 0x04, 0x08, 0x00, 0x00, 0x00, 0x00},  // '
    {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02},  // (
    {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08},  // )
    {0x00, 0x04, 0x15, 0x0e, 0x15, 0x04, 0x00},  // *
    {0x00, 0x04, 0x04, 0x1f, 0x04, 0x04, 0x00},  // +
    {0x00, 0x00, 0x00, 0x00, 0x0c, 0x04, 0x08},  // ,
    {0x00, 0x00, 0x00, 0x1f, 0x00, 0x00, 0x00},  // -
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x0c, 0x0c},  // .
    {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00},  // /
    {0x0e, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0e},  // 0
    {0x04, 0x0c, 0x04, 0x04, 0x04, 0x04, 0x0e},  // 1
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1f},  // 2
    {0x1f, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0e},  // 3
    {0x02, 0x06, 0x0a, 0x12, 0x1f, 0x02, 0x02},  // 4
    {0x1f, 0x10, 0x1e, 0x01, 0x01, 0x11, 0x0e},  // 5
    {0x06, 0x08, 0x10, 0x1e, 0x11, 0x11, 0x0e},  // 6
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08},  // 7
    {0x0e, 0x11, 0x11, 0x0e, 0x11, 0x11, 0x0e},  // 8
    {0x0e, 0x11, 0x11, 0x0f, 0x01, 0x02, 0x0c},  // 9
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x0c, 0x00},  // :
    {0x00, 0x0c, 0x0c, 0x00, 0x0c, 0x04, 0x08},  // ;
    {0x02, 0x04, 0x08, 0x10, 0x08, 0x04, 0x02},  // <
    {0x00, 0x00, 0x1f, 0x00, 0x1f, 0x00, 0x00},  // =
    {0x08, 0x04, 0x02, 0x01, 0x02, 0x04, 0x08},  // >
    {0x0e, 0x11, 0x01, 0x02, 0x04, 0x00, 0x04},  // ?
    {0x0e, 0x11, 0x01, 0x0d, 0x15, 0x15, 0x0e},  // @
    {0x0e, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11},  // A
    {0x1e, 0x11, 0x11, 0x1e, 0x11, 0x11, 0x1e},  // B
    {0x0e, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0e},  // C
    {0x1c, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1c},  // D
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x1f},  // E
    {0x1f, 0x10, 0x10, 0x1e, 0x10, 0x10, 0x10},  // F
    {0x0e, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0f},  // G
    {0x11, 0x11, 0x11, 0x1f, 0x11, 0x11, 0x11},  // H
    {0x0e, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e},  // I
    {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0c},  // J
    {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11},  // K
    {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1f},  // L
    {0x11, 0x1b, 0x15, 0x15, 0x11, 0x11, 0x11},  // M
    {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11},  // N
    {0x0e, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e},  // O
    {0x1e, 0x11, 0x11, 0x1e, 0x10, 0x10, 0x10},  // P
    {0x0e, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0d},  // Q
    {0x1e, 0x11, 0x11, 0x1e, 0x14, 0x12, 0x11},  // R
    {0x0f, 0x10, 0x10, 0x0e, 0x01, 0x01, 0x1e},  // S
    {0x1f, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // T
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0e},  // U
    {0x11, 0x11, 0x11, 0x11, 0x11, 0x0a, 0x04},  // V
    {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0a},  // W
    {0x11, 0x11, 0x0a, 0x04, 0x0a, 0x11, 0x11},  // X
    {0x11, 0x11, 0x0a, 0x04, 0x04, 0x04, 0x04},  // Y
    {0x1f, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1f},  // Z
    {0x0e, 0x08, 0x08, 0x08, 0x08, 0x08, 0x0e},  // [
    {0x00, 0x10, 0x08, 0x04, 0x02, 0x01, 0x00},  // backslash
    {0x0e, 0x02, 0x02, 0x02, 0x02, 0x02, 0x0e},  // ]
    {0x04, 0x0a, 0x11, 0x00, 0x00, 0x00, 0x00},  // ^
    {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1f},  // _
    {0x08, 0x04, 0x02, 0x00, 0x00, 0x00, 0x00},  // `
    {0x00, 0x00, 0x0e, 0x01, 0x0f, 0x11, 0x0f},  // a
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x1e},  // b
    {0x00, 0x00, 0x0e, 0x10, 0x10, 0x11, 0x0e},  // c
    {0x01, 0x01, 0x0d, 0x13, 0x11, 0x11, 0x0f},  // d
    {0x00, 0x00, 0x0e, 0x11, 0x1f, 0x10, 0x0e},  // e
    {0x06, 0x09, 0x08, 0x1c, 0x08, 0x08, 0x08},  // f
    {0x00, 0x00, 0x0f, 0x11, 0x0f, 0x01, 0x0e},  // g
    {0x10, 0x10, 0x16, 0x19, 0x11, 0x11, 0x11},  // h
    {0x04, 0x00, 0x0c, 0x04, 0x04, 0x04, 0x0e},  // i
    {0x02, 0x00, 0x06, 0x02, 0x02, 0x12, 0x0c},  // j
    {0x10, 0x10, 0x12, 0x14, 0x18, 0x14, 0x12},  // k
    {0x0c, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0e},  // l
    {0x00, 0x00, 0x1a, 0x15, 0x15, 0x11, 0x11},  // m
    {0x00, 0x00, 0x16, 0x19, 0x11, 0x11, 0x11},  // n
    {0x00, 0x00, 0x0e, 0x11, 0x11, 0x11, 0x0e},  // o
    {0x00, 0x00, 0x1e, 0x11, 0x1e, 0x10, 0x10},  // p
    {0x00, 0x00, 0x0f, 0x11, 0x0f, 0x01, 0x01},  // q
    {0x00, 0x00, 0x16, 0x19, 0x10, 0x10, 0x10},  // r
    {0x00, 0x00, 0x0f, 0x10, 0x0e, 0x01, 0x1e},  // s
    {0x08, 0x08, 0x1c, 0x08, 0x08, 0x09, 0x06},  // t
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x13, 0x0d},  // u
    {0x00, 0x00, 0x11, 0x11, 0x11, 0x0a, 0x04},  // v
    {0x00, 0x00, 0x11, 0x11, 0x15, 0x15, 0x0a},  // w
    {0x00, 0x00, 0x11, 0x0a, 0x04, 0x0a, 0x11},  // x
    {0x00, 0x00, 0x11, 0x11, 0x0f, 0x01, 0x0e},  // y
    {0x00, 0x00, 0x1f, 0x02, 0x04, 0x08, 0x1f},  // z
    {0x03, 0x04, 0x04, 0x08, 0x04, 0x04, 0x03},  // {
    {0x04, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04},  // |
    {0x18, 0x04, 0x04, 0x02, 0x04, 0x04, 0x18},  // }
    {0x00, 0x00, 0x08, 0x15, 0x02, 0x00, 0x00},  // ~
};

// What a character the font lacks draws as: a small hollow box, easy to spot
// and unlike any real glyph.
constexpr uint8_t kMissing[kGlyphH] = {0x00, 0x00, 0x1f, 0x11, 0x11, 0x11, 0x1f};

// The glyphs of s, one per character. Bytes 0x80-0xbf continue a UTF-8
// character that an earlier byte began, so they add no glyph: "µs" draws as a
// box and an s, not as two boxes and an s.
std::vector<const uint8_t*> glyphs(const std::string& s) {
  std::vector<const uint8_t*> out;
  for (const unsigned char ch : s) {
    if (ch >= 0x80 && ch < 0xc0) continue;
    out.push_back(ch >= 32 && ch <= 126 ? kFont[ch - 32] : kMissing);
  }
  return out;
}

// Draws s at scale 1 turned a quarter turn counterclockwise, so that it reads
// upwards. (x, y) is the bottom-left corner of the turned text: it covers
// columns [x, x+7) and rows (y - text_width(s), y]. The chart prints a bar's
// value this way when the bar is too narrow for it.
void text_up(Image& img, int x, int y, const std::string& s, uint32_t color) {
  int along = 0;  // how far up the current glyph starts
  for (const uint8_t* g : glyphs(s)) {
    for (int row = 0; row < kGlyphH; ++row)
      for (int col = 0; col < kGlyphW; ++col)
        if (g[row] & (0x10 >> col)) img.fill_rect(x + row, y - along - col, 1, 1, color);
    along += kAdvance;
  }
}

// ---------------------------------------------------------------------------
// The bar chart

// Series colors, chosen to stay apart from each other and from the grey of
// the grid; an eleventh series starts over with the first.
constexpr uint32_t kPalette[] = {
    0x3b6fb6,  // blue
    0xe8812d,  // orange
    0x3f9b4a,  // green
    0xd04545,  // red
    0x8c63b8,  // purple
    0x8b5a3c,  // brown
    0xdb6fb5,  // pink
    0x2ab0c0,  // cyan
    0xb8b02a,  // olive
    0x5c5c5c,  // dark grey
};
constexpr uint32_t kInk = 0x222222;   // text
constexpr uint32_t kAxis = 0x444444;  // the axis lines
constexpr uint32_t kGrid = 0xdddddd;  // gridlines, light enough to stay behind the bars
constexpr int kPad = 10;              // blank margin inside the chart's region
constexpr int kLine = kGlyphH;        // height of a line of text at scale 1

uint32_t series_color(size_t s) { return kPalette[s % std::size(kPalette)]; }

// values[s][k], or NaN where the caller gave none.
double value_at(const BarChart& c, size_t s, size_t k) {
  if (s < c.values.size() && k < c.values[s].size()) return c.values[s][k];
  return std::nan("");
}

std::string format(const char* fmt, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// s, or as much of it as fits in max_width pixels followed by "..". Whole
// UTF-8 characters are dropped, never half of one.
std::string fit(const Image& img, std::string s, int max_width, int scale = 1) {
  if (img.text_width(s, scale) <= max_width) return s;
  while (!s.empty() && img.text_width(s + "..", scale) > max_width) {
    while (!s.empty() && (static_cast<unsigned char>(s.back()) & 0xc0) == 0x80) s.pop_back();
    if (!s.empty()) s.pop_back();
  }
  return img.text_width(s + "..", scale) <= max_width ? s + ".." : "";
}

// The distance between ticks when a span is cut into at most max_ticks steps:
// the smallest of 1, 2 or 5 x 10^k that does it. Such steps give labels that
// read at a glance (0, 20, 40, 60 rather than 0, 17, 34, 51).
double nice_step(double span, int max_ticks) {
  const double raw = span / max_ticks;
  const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
  for (const double m : {1.0, 2.0, 5.0})
    if (m * magnitude >= raw * (1 - 1e-9)) return m * magnitude;
  return 10 * magnitude;
}

// The y axis: from lo (BarChart::y_min) up to hi, a whole number of steps.
struct Axis {
  double lo = 0, hi = 1, step = 1;
  int decimals = 0;  // digits after the point that tell the tick labels apart

  Axis(double lo_, double data_hi, int max_ticks) : lo(lo_) {
    const double span = data_hi > lo ? data_hi - lo : 1.0;  // nothing above y_min: show one unit
    step = nice_step(span, max_ticks);
    hi = std::max(std::ceil(data_hi / step - 1e-9) * step, lo + step);
    decimals = step >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step) - 1e-9));
  }
  // Where v falls between the bottom (0) and the top (1) of the axis.
  double fraction(double v) const { return (std::clamp(v, lo, hi) - lo) / (hi - lo); }
  // The tick values: the multiples of step from lo to hi. Counting in whole
  // steps, rather than adding step again and again, keeps rounding errors from
  // piling up into labels like 0.30000000000000004.
  std::vector<double> ticks() const {
    std::vector<double> t;
    // (The + 0.0 turns a -0.0, which ceil() gives for a small negative, into
    // 0.0, which prints as "0" rather than "-0". The cap of 100 ticks stops
    // the loop even where lo is so large that ++i no longer changes i.)
    for (double i = std::ceil(lo / step - 1e-9) + 0.0; i * step <= hi + step * 1e-9 && t.size() < 100; ++i)
      t.push_back(i * step);
    return t;
  }
  std::string label(double v) const {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
    return buf;
  }
};

// How the bars of one layout sit side by side. Group k spans
// [left + k*group, left + (k+1)*group); its bars take the middle 80% of it,
// each bar a slot of that, less a small gap to its neighbour.
struct BarLayout {
  double left = 0, group = 0, slot = 0;
  int gap = 0;
  enum class Labels { across, up, none } labels = Labels::none;
  int label_height = 0;  // pixels a value label needs above its bar

  int bar_x(size_t k, size_t s) const {
    return static_cast<int>(std::lround(left + (static_cast<double>(k) + 0.1) * group + static_cast<double>(s) * slot));
  }
  int bar_w(size_t k, size_t s) const { return bar_x(k, s + 1) - bar_x(k, s) - gap; }
};

// Lays the legend out in rows no wider than w, each row centred over the
// region, draws the rows that end above bottom, and returns the y below them.
int draw_legend(Image& img, int x, int y, int w, int bottom, const std::vector<std::string>& series) {
  constexpr int kSwatch = 7, kSwatchGap = 4, kEntryGap = 16, kRowGap = 6;
  struct Entry {
    size_t series;
    std::string name;
    int width;
  };
  std::vector<std::vector<Entry>> rows;
  std::vector<int> row_width;
  for (size_t s = 0; s < series.size(); ++s) {
    const std::string name = fit(img, series[s], w - kSwatch - kSwatchGap);
    const int width = kSwatch + kSwatchGap + img.text_width(name);
    if (rows.empty() || row_width.back() + kEntryGap + width > w) {  // start a new row
      rows.emplace_back();
      row_width.push_back(-kEntryGap);
    }
    rows.back().push_back({s, name, width});
    row_width.back() += kEntryGap + width;
  }
  for (size_t r = 0; r < rows.size() && y + kLine <= bottom; ++r) {
    int ex = x + (w - row_width[r]) / 2;
    for (const Entry& e : rows[r]) {
      img.fill_rect(ex, y, kSwatch, kSwatch, series_color(e.series));
      img.text(ex + kSwatch + kSwatchGap, y, e.name, kInk);
      ex += e.width + kEntryGap;
    }
    y += kLine + kRowGap;
  }
  return rows.empty() ? y : y + 2;  // a little more air between legend and plot
}

}  // namespace

// ---------------------------------------------------------------------------
// Image

Image::Image(int w, int h, uint32_t background) : width(w), height(h) {
  if (w < 0 || h < 0) throw std::invalid_argument("Image: negative size");
  rgb.resize(static_cast<size_t>(w) * static_cast<size_t>(h) * 3);
  fill_rect(0, 0, w, h, background);
}

void Image::fill_rect(int x, int y, int w, int h, uint32_t color) {
  // Clip in 64 bits, so that x + w cannot overflow.
  const int x0 = std::max(x, 0), y0 = std::max(y, 0);
  const int x1 = static_cast<int>(std::min<int64_t>(int64_t{x} + w, width));
  const int y1 = static_cast<int>(std::min<int64_t>(int64_t{y} + h, height));
  const auto r = static_cast<uint8_t>(color >> 16), g = static_cast<uint8_t>(color >> 8),
             b = static_cast<uint8_t>(color);
  if (x0 >= x1) return;  // nothing left (and no pixel row to point into)
  for (int row = y0; row < y1; ++row) {
    uint8_t* p = &rgb[(static_cast<size_t>(row) * width + x0) * 3];
    for (int col = x0; col < x1; ++col) {
      *p++ = r;
      *p++ = g;
      *p++ = b;
    }
  }
}

void Image::text(int x, int y, const std::string& s, uint32_t color, int scale) {
  for (const uint8_t* g : glyphs(s)) {
    for (int row = 0; row < kGlyphH; ++row)
      for (int col = 0; col < kGlyphW; ++col)
        if (g[row] & (0x10 >> col)) fill_rect(x + col * scale, y + row * scale, scale, scale, color);
    x += kAdvance * scale;
  }
}

int Image::text_width(const std::string& s, int scale) const {
  const int n = static_cast<int>(glyphs(s).size());
  return n == 0 ? 0 : (n * kAdvance - 1) * scale;  // no blank column after the last glyph
}

// ---------------------------------------------------------------------------
// PNG: 8-bit RGB, no interlacing, filter 0 ("none") on every row. Three chunks
// (IHDR, IDAT, IEND), each a big-endian length, a type, the data and a CRC-32
// of type and data. zlib is already a dependency of snug (data/ reads gzip
// files with it), so it compresses the rows and computes the CRCs: a chart of
// flat colours shrinks to a few kilobytes.

namespace {

void put_u32(std::vector<uint8_t>& out, uint32_t v) {  // PNG's integers are big-endian
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(static_cast<uint8_t>(v >> shift));
}

void put_chunk(std::vector<uint8_t>& out, const char type[4], const std::vector<uint8_t>& data) {
  put_u32(out, static_cast<uint32_t>(data.size()));
  const size_t start = out.size();
  out.insert(out.end(), type, type + 4);
  out.insert(out.end(), data.begin(), data.end());
  put_u32(out, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0), out.data() + start, static_cast<uInt>(out.size() - start))));
}

}  // namespace

std::vector<uint8_t> encode_png(const Image& img) {
  const size_t row_bytes = static_cast<size_t>(img.width) * 3;
  if (img.width <= 0 || img.height <= 0 || img.rgb.size() != row_bytes * static_cast<size_t>(img.height))
    throw std::invalid_argument("encode_png: an image of " + std::to_string(img.width) + " x " +
                                std::to_string(img.height) + " needs width*height*3 bytes, got " +
                                std::to_string(img.rgb.size()));
  // The signature: a non-ASCII byte, "PNG", then CR LF, ^Z, LF, which let a
  // reader notice a file mangled by text-mode line ending conversion.
  std::vector<uint8_t> file = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  std::vector<uint8_t> header;
  put_u32(header, static_cast<uint32_t>(img.width));
  put_u32(header, static_cast<uint32_t>(img.height));
  header.insert(header.end(), {8, 2, 0, 0, 0});  // 8 bits, RGB, deflate, filter set 0, no interlace
  put_chunk(file, "IHDR", header);
  // Each row is preceded by its filter type byte (0: the bytes as they are).
  std::vector<uint8_t> raw;
  raw.reserve((row_bytes + 1) * static_cast<size_t>(img.height));
  for (int y = 0; y < img.height; ++y) {
    raw.push_back(0);
    const auto row = img.rgb.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(y) * row_bytes);
    raw.insert(raw.end(), row, row + static_cast<std::ptrdiff_t>(row_bytes));
  }
  uLongf n = compressBound(static_cast<uLong>(raw.size()));
  std::vector<uint8_t> z(n);
  if (compress2(z.data(), &n, raw.data(), static_cast<uLong>(raw.size()), 9) != Z_OK)
    throw std::runtime_error("encode_png: zlib could not compress the image");
  z.resize(n);
  put_chunk(file, "IDAT", z);
  put_chunk(file, "IEND", {});
  return file;
}

void write_png(const Image& img, const std::string& path) {
  const std::vector<uint8_t> file = encode_png(img);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(file.data()), static_cast<std::streamsize>(file.size()));
  out.close();
  if (!out) throw std::runtime_error("write_png: cannot write " + path);
}

// ---------------------------------------------------------------------------
// draw_bar_chart

void draw_bar_chart(Image& img, int x, int y, int w, int h, const BarChart& c) {
  const int inner_w = w - 2 * kPad;
  const int right = x + w - kPad, bottom = y + h - kPad;
  int top = y + kPad;  // moves down past the title, the legend and the y label

  // Each piece of text is drawn only where it fits above the region's bottom,
  // so that a small region stays a small region.
  if (!c.title.empty() && top + 2 * kLine <= bottom) {  // large if it fits, else small, else cut short
    const int scale = img.text_width(c.title, 2) <= inner_w ? 2 : 1;
    const std::string title = fit(img, c.title, inner_w, scale);
    img.text(x + (w - img.text_width(title, scale)) / 2, top, title, kInk, scale);
    top += kLine * scale + 10;
  }
  top = draw_legend(img, x + kPad, top, inner_w, bottom, c.series);
  if (!c.y_label.empty() && top + kLine <= bottom) {  // above the axis, where it needs no turning
    img.text(x + kPad, top, fit(img, c.y_label, inner_w), kInk);
    top += kLine + 4;
  }

  // The plot: leave half a line above it for the top tick label and a line
  // below it for the category labels.
  const int plot_top = top + kLine / 2 + 1;
  const int plot_bottom = bottom - kLine - 6;
  const int plot_h = plot_bottom - plot_top;
  const size_t n_cat = c.categories.size(), n_ser = c.series.size();
  if (plot_h < 2 * kLine || n_cat == 0 || inner_w < 4 * kLine) return;  // no room for a plot, or nothing to plot

  // Where the axis starts (a NaN or infinite y_min would leave no axis to
  // draw, so it counts as 0), the largest value, and the widest printed value.
  const double y_min = std::isfinite(c.y_min) ? c.y_min : 0.0;
  double data_hi = y_min;
  int widest_value = 0;
  for (size_t s = 0; s < n_ser; ++s)
    for (size_t k = 0; k < n_cat; ++k)
      if (const double v = value_at(c, s, k); std::isfinite(v)) {
        data_hi = std::max(data_hi, v);
        widest_value = std::max(widest_value, img.text_width(format(c.value_format.c_str(), v)));
      }

  // The width of the tick labels decides where the plot starts on the left,
  // the plot's width decides whether the values fit across their bars or must
  // be turned upwards, and that decides how far the axis must reach so that
  // every label fits above its bar, which changes the tick labels. Going round
  // this circle a few times settles it; plot_left only ever grows, so it ends.
  int plot_left = x + kPad;
  const int max_ticks = std::clamp(plot_h / 30, 2, 10);  // ticks at least ~30 px apart
  Axis axis(y_min, data_hi, max_ticks);
  BarLayout bars;
  for (int round = 0;; ++round) {
    bars.left = plot_left;
    bars.group = static_cast<double>(right - plot_left) / static_cast<double>(n_cat);
    bars.slot = 0.8 * bars.group / static_cast<double>(std::max<size_t>(n_ser, 1));
    bars.gap = bars.slot >= 6 ? std::max(1, static_cast<int>(bars.slot / 7)) : 0;
    // A label sits 3 px above its bar; one more pixel absorbs rounding.
    if (widest_value + 2 <= bars.slot) {  // across, with 2 px or more between neighbours
      bars.labels = BarLayout::Labels::across;
      bars.label_height = kLine + 4;
    } else if (kLine + 1 <= bars.slot) {  // upwards, one line of text per bar
      bars.labels = BarLayout::Labels::up;
      bars.label_height = widest_value + 4;
    } else {  // too many bars to label any
      bars.labels = BarLayout::Labels::none;
      bars.label_height = 0;
    }

    // Reach high enough that each bar leaves room above it for its label: a
    // bar may rise at most a fraction `room` of the plot. Where the labels
    // would take most of the plot (turned upwards in a short one), leave
    // them out instead.
    const double room = 1.0 - static_cast<double>(bars.label_height) / plot_h;
    if (room < 0.25) bars.labels = BarLayout::Labels::none;
    double axis_hi = data_hi;
    if (bars.labels != BarLayout::Labels::none) axis_hi = y_min + (data_hi - y_min) / room;
    axis = Axis(y_min, axis_hi, max_ticks);

    int widest_tick = 0;
    for (const double t : axis.ticks()) widest_tick = std::max(widest_tick, img.text_width(axis.label(t)));
    const int needed = x + kPad + widest_tick + 6;
    if (needed <= plot_left || round == 3) break;
    plot_left = needed;
  }
  const int plot_w = right - plot_left;
  auto y_of = [&](double v) { return plot_bottom - static_cast<int>(std::lround(axis.fraction(v) * plot_h)); };

  // Gridlines and tick labels first, so that the bars cover the gridlines.
  for (const double t : axis.ticks()) {
    const int ty = y_of(t);
    img.fill_rect(plot_left, ty, plot_w, 1, kGrid);
    const std::string label = axis.label(t);
    img.text(plot_left - 5 - img.text_width(label), ty - kLine / 2, label, kInk);
  }

  for (size_t k = 0; k < n_cat; ++k) {
    for (size_t s = 0; s < n_ser; ++s) {
      const double v = value_at(c, s, k);
      if (!std::isfinite(v)) continue;  // NaN: no bar, no label
      const int bx = bars.bar_x(k, s), bw = std::max(1, bars.bar_w(k, s)), by = y_of(v);
      img.fill_rect(bx, by, bw, plot_bottom - by, series_color(s));
      const std::string label = format(c.value_format.c_str(), v);
      const int cx = bx + bw / 2;  // the bar's centre
      if (bars.labels == BarLayout::Labels::across)
        img.text(cx - img.text_width(label) / 2, by - 3 - kLine, label, kInk);
      else if (bars.labels == BarLayout::Labels::up)
        text_up(img, cx - kLine / 2, by - 3, label, kInk);
    }
    // The category's name, centred under its group.
    const std::string name = fit(img, c.categories[k], static_cast<int>(bars.group) - 4);
    const int gx = static_cast<int>(std::lround(bars.left + (static_cast<double>(k) + 0.5) * bars.group));
    img.text(gx - img.text_width(name) / 2, plot_bottom + 6, name, kInk);
  }

  // The axis lines last, over the bars' feet.
  img.fill_rect(plot_left, plot_top, 1, plot_h + 1, kAxis);
  img.fill_rect(plot_left, plot_bottom, plot_w, 1, kAxis);
}

}  // namespace picture
