// koi train plot RUN: the loss curves of a training run (train loss per step, validation loss
// at each evaluation) from RUN/metrics.jsonl, as an SVG page.
#include <boost/json.hpp>

#include <cstdio>
#include <fstream>

#include "base/file.h"
#include "base/svg_chart.h"
#include "cli/command.h"

namespace koi::cli {
namespace {

struct PlotOptions {
  std::string run;
  std::string output;
};

int run_plot(const PlotOptions& o) {
  const std::string metrics_path = path_join(o.run, "metrics.jsonl");
  std::ifstream in(metrics_path);
  if (!in) return fail(metrics_path + ": cannot open; is '" + o.run + "' a training run folder?");
  SvgSeries train{"train loss", "#9ecae1", {}, 1.0};
  SvgSeries val{"validation loss", "#d62728", {}, 2.0};
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.empty()) continue;
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(line, ec);
    if (ec || !v.is_object()) {
      return fail(metrics_path + ":" + std::to_string(line_no) + ": not a JSON object; the file is damaged");
    }
    const auto& obj = v.as_object();
    const auto* step = obj.if_contains("step");
    if (step == nullptr || !step->is_number()) continue;
    const double s = step->to_number<double>();
    // A resumed run logs the steps after its checkpoint again; the later line wins.
    auto add = [s](SvgSeries& series, const boost::json::value* value) {
      if (value == nullptr || !value->is_number()) return;
      while (!series.points.empty() && series.points.back().first >= s) series.points.pop_back();
      series.points.emplace_back(s, value->to_number<double>());
    };
    add(train, obj.if_contains("loss"));
    add(val, obj.if_contains("val_loss"));
  }
  if (train.points.empty() && val.points.empty()) return fail(metrics_path + ": no loss values to plot");
  SvgChart chart;
  chart.title = "loss: " + o.run;
  chart.x_label = "step";
  chart.y_label = "loss";
  chart.series = {train, val};
  const std::string out = o.output.empty() ? path_join(o.run, "loss.svg") : o.output;
  if (Status s = write_file_atomic(out, chart.render()); !s.ok()) return fail(s.message());
  std::printf("wrote %s (%zu train points, %zu validation points)\n", out.c_str(), train.points.size(),
              val.points.size());
  return 0;
}

Runner setup_plot(CLI::App* app) {
  auto o = std::make_shared<PlotOptions>();
  app->add_option("run", o->run, "the training run folder (holds metrics.jsonl)")->required();
  app->add_option("-o,--output", o->output, "the SVG file to write (default: RUN/loss.svg)");
  return [o] { return run_plot(*o); };
}

}  // namespace
KOI_SUBCOMMAND(train, plot, "draw a run's train and validation loss curves as an SVG", setup_plot);
}  // namespace koi::cli
