// SPDX-License-Identifier: MIT
// The bar chart of docs/img/memory_tour.png: for each strategy, its peak
// allocated and peak reserved memory in MiB, drawn with the examples' picture
// maker (examples/common/picture.h: a 5 x 7 bitmap font and a PNG writer, so
// the example needs no font or plotting library).
#include "memory_tour/tour.h"

namespace memory_tour {

picture::Image bar_chart(const std::vector<Result>& results) {
  picture::BarChart c;
  c.title = "peak memory per strategy (MiB)";
  c.y_label = "MiB";
  c.value_format = "%.1f";
  c.series = {"allocated", "reserved"};
  c.values.assign(2, {});
  for (const Result& r : results) {
    c.categories.push_back(r.name);
    c.values[0].push_back(static_cast<double>(r.peak_allocated) / 1048576.0);
    c.values[1].push_back(static_cast<double>(r.peak_reserved) / 1048576.0);
  }
  picture::Image img(100 + 128 * static_cast<int>(results.size()), 480);
  picture::draw_bar_chart(img, 0, 0, img.width, img.height, c);
  return img;
}

}  // namespace memory_tour
