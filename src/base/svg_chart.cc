#include "base/svg_chart.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>

namespace koi {
namespace {

std::string default_tick(double v) { return fmt::format("{:.3g}", v); }

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else out += c;
  }
  return out;
}

}  // namespace

std::string SvgChart::render() const {
  constexpr double kLeft = 60, kRight = 20, kTop = 30, kBottom = 50;
  constexpr int kTicks = 4;
  double x0 = x_min, x1 = x_max, y0 = y_min, y1 = y_max;
  if (x0 == x1 || y0 == y1) {
    double lo_x = std::numeric_limits<double>::max(), hi_x = std::numeric_limits<double>::lowest();
    double lo_y = lo_x, hi_y = hi_x;
    for (const SvgSeries& s : series) {
      for (const auto& [x, y] : s.points) {
        lo_x = std::min(lo_x, x), hi_x = std::max(hi_x, x);
        lo_y = std::min(lo_y, y), hi_y = std::max(hi_y, y);
      }
    }
    if (lo_x > hi_x) lo_x = 0, hi_x = 1, lo_y = 0, hi_y = 1;  // no data
    if (x0 == x1) x0 = lo_x, x1 = hi_x;
    if (y0 == y1) y0 = lo_y, y1 = hi_y;
  }
  if (x1 <= x0) x1 = x0 + 1;
  if (y1 <= y0) y1 = y0 + 1;
  auto px = [&](double v) { return kLeft + (width - kLeft - kRight) * (v - x0) / (x1 - x0); };
  auto py = [&](double v) { return height - kBottom - (height - kTop - kBottom) * (v - y0) / (y1 - y0); };
  auto xt = x_tick ? x_tick : default_tick;
  auto yt = y_tick ? y_tick : default_tick;

  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" "
      "font-size=\"12\">\n<text x=\"{}\" y=\"18\">{}</text>\n",
      width, height, kLeft, escape(title));
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", kLeft, py(y0),
                     width - kRight);
  out += fmt::format("<line x1=\"{0}\" y1=\"{1:.1f}\" x2=\"{0}\" y2=\"{2:.1f}\" stroke=\"black\"/>\n", kLeft, py(y0),
                     py(y1));
  for (int tick = 0; tick <= kTicks; ++tick) {
    const double f = static_cast<double>(tick) / kTicks;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{}</text>\n", kLeft - 6, py(y0 + f * (y1 - y0)) + 4,
                       escape(yt(y0 + f * (y1 - y0))));
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", px(x0 + f * (x1 - x0)),
                       height - kBottom + 16, escape(xt(x0 + f * (x1 - x0))));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (kLeft + width - kRight) / 2,
                     height - 12, escape(x_label));
  if (!y_label.empty()) {
    out += fmt::format("<text x=\"14\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 14 {0})\">{1}</text>\n",
                       (kTop + height - kBottom) / 2, escape(y_label));
  }
  for (size_t s = 0; s < series.size(); ++s) {
    std::string points;
    for (const auto& [x, y] : series[s].points) points += fmt::format("{:.1f},{:.1f} ", px(x), py(y));
    out += fmt::format("<polyline fill=\"none\" stroke=\"{}\" stroke-width=\"{}\" points=\"{}\"/>\n", series[s].color,
                       series[s].stroke_width, points);
    if (series.size() > 1) {
      out += fmt::format("<text x=\"{}\" y=\"{}\" fill=\"{}\" text-anchor=\"end\">{}</text>\n", width - kRight,
                         kTop + 14 * static_cast<int>(s), series[s].color, escape(series[s].name));
    }
  }
  return out + "</svg>\n";
}

}  // namespace koi
