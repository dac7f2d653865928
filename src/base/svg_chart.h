// SvgChart: a small line chart rendered as a standalone SVG document (loss curves, GPU
// allocation over time). Series are drawn as polylines over shared linear axes; the caller
// formats tick labels. A plain value; render() is a pure function of it.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace koi {

struct SvgSeries {
  std::string name;                             // shown in the legend when there are 2+ series
  std::string color;                            // CSS colour, e.g. "#1f77b4"
  std::vector<std::pair<double, double>> points;  // (x, y), in x order
  double stroke_width = 1.5;
};

struct SvgChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<SvgSeries> series;
  // Axis ranges; when min == max they are taken from the data.
  double x_min = 0, x_max = 0, y_min = 0, y_max = 0;
  std::function<std::string(double)> x_tick = nullptr;  // default: "%.3g"
  std::function<std::string(double)> y_tick = nullptr;
  int width = 640, height = 320;

  std::string render() const;
};

}  // namespace koi
