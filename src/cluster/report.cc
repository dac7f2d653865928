// JSON and SVG renderings of a SimResult (declared in simulator.h).
#include <fmt/format.h>

#include <cmath>

#include "cluster/simulator.h"

namespace koi::cluster {
namespace {

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += fmt::format("\\u{:04x}", static_cast<int>(ch));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string num(double v) { return std::isfinite(v) ? fmt::format("{:.6g}", v) : "null"; }

}  // namespace

std::string sim_json(const SimResult& r) {
  std::string out = "{\n";
  out += fmt::format("  \"policy\": {},\n  \"mode\": {},\n", json_string(r.policy), json_string(r.mode));
  out += fmt::format("  \"jobs\": {},\n  \"unschedulable\": {},\n", r.jobs, r.unschedulable);
  if (r.mode == "replay") {
    out += fmt::format("  \"finished\": {},\n  \"unfinished\": {},\n  \"preemptions\": {},\n", r.finished, r.unfinished,
                       r.preemptions);
    out += fmt::format("  \"avg_jct_s\": {},\n  \"p99_jct_s\": {},\n", num(r.avg_jct), num(r.p99_jct));
    out += fmt::format("  \"avg_queueing_s\": {},\n  \"p99_queueing_s\": {},\n", num(r.avg_queueing), num(r.p99_queueing));
    out += fmt::format("  \"makespan_s\": {},\n  \"avg_gpu_allocation\": {},\n", num(r.makespan), num(r.avg_allocation));
    out += fmt::format("  \"unallocated_gpu_at_saturation\": {},\n  \"saturated_s\": {},\n",
                       num(r.unallocated_at_saturation), num(r.saturated_seconds));
  } else {
    out += fmt::format("  \"placed\": {},\n  \"failed\": {},\n  \"first_failure_arrived\": {},\n", r.finished, r.failed,
                       num(r.first_failure_arrived));
    out += fmt::format("  \"unallocated_gpu_at_full\": {},\n  \"gpu_allocation_at_end\": {},\n", num(r.unallocated_at_full),
                       num(r.allocation_at_end));
  }
  out += "  \"queues\": [";
  for (size_t i = 0; i < r.queues.size(); ++i) {
    const QueueResult& q = r.queues[i];
    out += fmt::format(
        "{}\n    {{\"name\": {}, \"finished\": {}, \"gpu_seconds\": {}, \"share\": {}, \"avg_jct_s\": {}, "
        "\"avg_finish_time_fairness\": {}, \"max_finish_time_fairness\": {}}}",
        i ? "," : "", json_string(q.name), q.finished, num(q.gpu_seconds), num(q.share), num(q.avg_jct), num(q.avg_ftf),
        num(q.max_ftf));
  }
  out += "\n  ],\n  \"allocation_curve\": [";
  for (size_t i = 0; i < r.curve.size(); ++i) {
    out += fmt::format("{}[{}, {}]", i ? ", " : "", num(r.curve[i].first), num(r.curve[i].second));
  }
  out += "],\n  \"waiting\": [";
  for (size_t i = 0; i < r.waiting.size(); ++i) out += fmt::format("{}\n    {}", i ? "," : "", json_string(r.waiting[i]));
  out += r.waiting.empty() ? "]\n}\n" : "\n  ]\n}\n";
  return out;
}

std::string sim_svg(const SimResult& r) {
  constexpr double kW = 640, kH = 320, kLeft = 60, kRight = 20, kTop = 30, kBottom = 50;
  double x_max = r.curve.empty() ? 1 : r.curve.back().first;
  if (x_max <= 0) x_max = 1;
  auto x = [&](double v) { return kLeft + (kW - kLeft - kRight) * v / x_max; };
  auto y = [&](double v) { return kH - kBottom - (kH - kTop - kBottom) * v; };
  std::string points;
  for (const auto& [t, a] : r.curve) points += fmt::format("{:.1f},{:.1f} ", x(t), y(a));
  bool fill = r.mode == "fill";
  std::string out = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{}\" height=\"{}\" font-family=\"sans-serif\" font-size=\"12\">\n"
      "<text x=\"{}\" y=\"18\">GPU allocation rate: policy {} ({})</text>\n",
      kW, kH, kLeft, r.policy, r.mode);
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{2}\" y2=\"{1}\" stroke=\"black\"/>\n", kLeft, y(0), kW - kRight);
  out += fmt::format("<line x1=\"{0}\" y1=\"{1}\" x2=\"{0}\" y2=\"{2}\" stroke=\"black\"/>\n", kLeft, y(0), y(1));
  for (int tick = 0; tick <= 4; ++tick) {
    double v = tick / 4.0;
    out += fmt::format("<text x=\"{}\" y=\"{:.1f}\" text-anchor=\"end\">{:.0f}%</text>\n", kLeft - 6, y(v) + 4, v * 100);
    out += fmt::format("<text x=\"{:.1f}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", x(v * x_max), kH - kBottom + 16,
                       fill ? fmt::format("{:.0f}%", v * x_max * 100) : fmt::format("{:.3g}h", v * x_max / 3600));
  }
  out += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text>\n", (kLeft + kW - kRight) / 2, kH - 12,
                     fill ? "arrived GPU demand (% of capacity)" : "time since first arrival");
  out += fmt::format("<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"{}\"/>\n</svg>\n", points);
  return out;
}

}  // namespace koi::cluster
