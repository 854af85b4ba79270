// SPDX-License-Identifier: MIT
// The examples' picture maker (memory_tour's and alloc_lab's charts), with no
// dependency beyond zlib, which snug has already: an RGB image with rectangles
// and text in a built-in 5x7 bitmap font, a PNG writer, and a grouped bar chart.
//
//   Image img(900, 500);
//   BarChart c;
//   c.title = "peak reserved memory";  c.y_label = "MiB";
//   c.categories = {"charlm", "mnist"};  c.series = {"caching", "bump"};
//   c.values = {{12.5, 3.0}, {10.0, 2.5}};       // values[series][category]
//   draw_bar_chart(img, 0, 0, img.width, img.height, c);
//   write_png(img, "peak.png");

#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace picture {

// A 24-bit RGB picture, row-major, top row first. Colors are 0xRRGGBB.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width*height*3 bytes: R, G, B of each pixel

  Image(int w, int h, uint32_t background = 0xffffff);

  // Paints the rectangle [x, x+w) x [y, y+h); whatever falls outside the image
  // is left out, so callers never need to clip.
  void fill_rect(int x, int y, int w, int h, uint32_t color);

  // Draws s with its top-left corner at (x, y) in the built-in 5x7 font, each
  // font pixel a scale x scale square. A character the font lacks (anything
  // outside printable ASCII) draws as a small box, one per UTF-8 character.
  void text(int x, int y, const std::string& s, uint32_t color, int scale = 1);

  // The width in pixels that text(s, scale) covers; its height is 7*scale.
  int text_width(const std::string& s, int scale = 1) const;
};

// Writes img as a PNG (8-bit RGB, compressed with zlib). Throws
// std::runtime_error naming the path when the file cannot be written,
// std::invalid_argument for an empty or inconsistent image.
void write_png(const Image& img, const std::string& path);
std::vector<uint8_t> encode_png(const Image& img);  // the bytes write_png writes

// A grouped bar chart: one group per category (e.g. a trace), one bar per
// series (e.g. an allocator policy) in each group, with a legend, y-axis ticks
// with labels, the title at the top, and each bar's value printed above it with
// value_format (printf, e.g. "%.2f"; it is given one double).
struct BarChart {
  std::string title, y_label, value_format = "%.2f";
  std::vector<std::string> categories;      // x groups
  std::vector<std::string> series;          // bars within a group (legend)
  std::vector<std::vector<double>> values;  // values[series][category]; NaN (or missing) = no bar
  double y_min = 0;                         // axis starts here (e.g. 1.0 for ratios works too)
};

// Draws the chart into the w x h region of img whose top-left corner is (x, y).
void draw_bar_chart(Image& img, int x, int y, int w, int h, const BarChart& c);

}  // namespace picture
