#include "base/svg_chart.h"

#include <gtest/gtest.h>

namespace koi {
namespace {

TEST(SvgChartTest, PlotsSeriesOnSharedAxes) {
  SvgChart c;
  c.title = "loss <train>";
  c.x_label = "step";
  c.width = 200;
  c.height = 100;
  c.series.push_back({"train", "red", {{0, 4}, {10, 2}}});
  c.series.push_back({"val", "blue", {{0, 4}, {10, 3}}});
  const std::string svg = c.render();
  // Plot area x: 60..180, y: 50 (bottom, y=2) .. 30 (top, y=4).
  EXPECT_NE(svg.find("points=\"60.0,30.0 180.0,50.0 \""), std::string::npos) << svg;
  EXPECT_NE(svg.find("points=\"60.0,30.0 180.0,40.0 \""), std::string::npos) << svg;
  EXPECT_NE(svg.find("loss &lt;train&gt;"), std::string::npos);
  EXPECT_NE(svg.find(">val</text>"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

TEST(SvgChartTest, EmptyChartStillRenders) {
  SvgChart c;
  EXPECT_NE(c.render().find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace koi
