// SPDX-License-Identifier: MIT
// The bar chart of docs/img/memory_tour.png: for each strategy, its peak
// allocated and peak reserved memory in MiB. Drawn with two primitives
// (filled rectangles and text) into an RGB image; the text uses a 5 x 7
// bitmap font defined below, upper case only, which is all a chart's labels
// need and keeps the example free of a font or plotting library.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>

#include "memory_tour/tour.h"

namespace memory_tour {

namespace {

// Each glyph is 7 rows of 5 pixels; bit 4 of a row is its leftmost pixel.
using Glyph = std::array<uint8_t, 7>;
const std::map<char, Glyph>& font() {
  static const std::map<char, Glyph> f = {
      {'A', {0x0E, 0x11, 0x11, 0x11, 0x1F, 0x11, 0x11}}, {'B', {0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E}},
      {'C', {0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E}}, {'D', {0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C}},
      {'E', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F}}, {'F', {0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10}},
      {'G', {0x0E, 0x11, 0x10, 0x17, 0x11, 0x11, 0x0F}}, {'H', {0x11, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11}},
      {'I', {0x0E, 0x04, 0x04, 0x04, 0x04, 0x04, 0x0E}}, {'J', {0x07, 0x02, 0x02, 0x02, 0x02, 0x12, 0x0C}},
      {'K', {0x11, 0x12, 0x14, 0x18, 0x14, 0x12, 0x11}}, {'L', {0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x1F}},
      {'M', {0x11, 0x1B, 0x15, 0x15, 0x11, 0x11, 0x11}}, {'N', {0x11, 0x11, 0x19, 0x15, 0x13, 0x11, 0x11}},
      {'O', {0x0E, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'P', {0x1E, 0x11, 0x11, 0x1E, 0x10, 0x10, 0x10}},
      {'Q', {0x0E, 0x11, 0x11, 0x11, 0x15, 0x12, 0x0D}}, {'R', {0x1E, 0x11, 0x11, 0x1E, 0x14, 0x12, 0x11}},
      {'S', {0x0F, 0x10, 0x10, 0x0E, 0x01, 0x01, 0x1E}}, {'T', {0x1F, 0x04, 0x04, 0x04, 0x04, 0x04, 0x04}},
      {'U', {0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x0E}}, {'V', {0x11, 0x11, 0x11, 0x11, 0x11, 0x0A, 0x04}},
      {'W', {0x11, 0x11, 0x11, 0x15, 0x15, 0x15, 0x0A}}, {'X', {0x11, 0x11, 0x0A, 0x04, 0x0A, 0x11, 0x11}},
      {'Y', {0x11, 0x11, 0x11, 0x0A, 0x04, 0x04, 0x04}}, {'Z', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x10, 0x1F}},
      {'0', {0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E}}, {'1', {0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E}},
      {'2', {0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F}}, {'3', {0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E}},
      {'4', {0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02}}, {'5', {0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E}},
      {'6', {0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E}}, {'7', {0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08}},
      {'8', {0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E}}, {'9', {0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C}},
      {'.', {0x00, 0x00, 0x00, 0x00, 0x00, 0x0C, 0x0C}}, {'_', {0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x1F}},
      {'-', {0x00, 0x00, 0x00, 0x1F, 0x00, 0x00, 0x00}}, {'/', {0x00, 0x01, 0x02, 0x04, 0x08, 0x10, 0x00}},
      {'(', {0x02, 0x04, 0x08, 0x08, 0x08, 0x04, 0x02}}, {')', {0x08, 0x04, 0x02, 0x02, 0x02, 0x04, 0x08}},
      {':', {0x00, 0x0C, 0x0C, 0x00, 0x0C, 0x0C, 0x00}}, {',', {0x00, 0x00, 0x00, 0x00, 0x0C, 0x04, 0x08}},
  };
  return f;
}

struct Rgb {
  uint8_t r, g, b;
};
const Rgb kWhite{255, 255, 255}, kBlack{0, 0, 0}, kGrid{225, 225, 225}, kAllocated{31, 119, 180},
    kReserved{174, 199, 232};

struct Canvas {
  Image img;
  Canvas(int w, int h) {
    img.width = w, img.height = h;
    img.rgb.assign(size_t(w) * size_t(h) * 3, 255);
  }
  // Fills [x0, x1) x [y0, y1), clipped to the image.
  void rect(int x0, int y0, int x1, int y1, Rgb c) {
    for (int y = std::max(y0, 0); y < std::min(y1, img.height); ++y)
      for (int x = std::max(x0, 0); x < std::min(x1, img.width); ++x) {
        uint8_t* p = &img.rgb[(size_t(y) * size_t(img.width) + size_t(x)) * 3];
        p[0] = c.r, p[1] = c.g, p[2] = c.b;
      }
  }
  // Glyphs are 5 x 7 cells of `s` pixels, one blank column between letters.
  static int text_width(const std::string& t, int s) { return t.empty() ? 0 : int(t.size()) * 6 * s - s; }
  void text(int x, int y, const std::string& t, int s, Rgb c) {
    for (char ch : t) {
      const auto g = font().find(char(std::toupper(static_cast<unsigned char>(ch))));
      if (g != font().end())
        for (int row = 0; row < 7; ++row)
          for (int col = 0; col < 5; ++col)
            if (g->second[size_t(row)] & (0x10 >> col)) rect(x + col * s, y + row * s, x + (col + 1) * s, y + (row + 1) * s, c);
      x += 6 * s;
    }
  }
};

// A grid step of 1, 2 or 5 times a power of ten giving at most 6 lines up to top.
double nice_step(double top) {
  const double p = std::pow(10.0, std::floor(std::log10(std::max(top, 1e-9))));
  for (double m : {0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0})
    if (top / (m * p) <= 6) return m * p;
  return 10 * p;
}

std::string fmt(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

Image bar_chart(const std::vector<Result>& results) {
  const int group = 128, left = 80, right = 20, top = 70, bottom = 50, height = 480;
  const int width = left + group * int(results.size()) + right;
  Canvas c(width, height);
  const int y_axis = height - bottom;  // the pixel row of 0 MiB

  double most = 0;
  for (const Result& r : results) most = std::max({most, double(r.peak_allocated), double(r.peak_reserved)});
  most /= 1048576.0;
  const double step = nice_step(most);
  const double ymax = std::max(step, std::ceil(most / step) * step);
  auto ypix = [&](double mib) { return y_axis - int(std::lround(mib / ymax * double(y_axis - top))); };

  c.text(left, 14, "peak memory per strategy (MiB)", 2, kBlack);
  c.rect(width - 330, 14, width - 316, 28, kAllocated);
  c.text(width - 308, 14, "allocated", 2, kBlack);
  c.rect(width - 170, 14, width - 156, 28, kReserved);
  c.text(width - 148, 14, "reserved", 2, kBlack);

  const int digits = step < 1 ? 1 : 0;
  for (double v = 0; v <= ymax + step / 2; v += step) {
    c.rect(left, ypix(v), width - right, ypix(v) + 1, kGrid);
    const std::string label = fmt(v, digits);
    c.text(left - 8 - Canvas::text_width(label, 2), ypix(v) - 7, label, 2, kBlack);
  }
  for (size_t i = 0; i < results.size(); ++i) {
    const Result& r = results[i];
    const int x = left + group * int(i) + group / 2;  // the group's centre
    const double a = double(r.peak_allocated) / 1048576.0, res = double(r.peak_reserved) / 1048576.0;
    c.rect(x - 44, ypix(a), x - 2, y_axis, kAllocated);
    c.rect(x + 2, ypix(res), x + 44, y_axis, kReserved);
    const std::string la = fmt(a, 1), lr = fmt(res, 1);
    c.text(x - 23 - Canvas::text_width(la, 1) / 2, ypix(a) - 10, la, 1, kBlack);
    c.text(x + 23 - Canvas::text_width(lr, 1) / 2, ypix(res) - 10, lr, 1, kBlack);
    c.text(x - Canvas::text_width(r.name, 2) / 2, y_axis + 14, r.name, 2, kBlack);
  }
  c.rect(left, top - 10, left + 1, y_axis + 1, kBlack);  // the axes
  c.rect(left, y_axis, width - right, y_axis + 1, kBlack);
  return std::move(c.img);
}

}  // namespace memory_tour
