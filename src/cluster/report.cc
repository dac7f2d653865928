// JSON and SVG renderings of a SimResult (declared in simulator.h).
#include <fmt/format.h>

#include <cmath>

#include "base/svg_chart.h"
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
    out += fmt::format("  \"finished\": {},\n  \"unfinished\": {},\n  \"preemptions\": {},\n  \"unstable_instants\": {},\n",
                       r.finished, r.unfinished, r.preemptions, r.unstable_instants);
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
    if (r.mode == "replay") {
      out += fmt::format(
          "{}\n    {{\"name\": {}, \"finished\": {}, \"gpu_seconds\": {}, \"share\": {}, \"avg_jct_s\": {}, "
          "\"avg_finish_time_fairness\": {}, \"max_finish_time_fairness\": {}}}",
          i ? "," : "", json_string(q.name), q.finished, num(q.gpu_seconds), num(q.share), num(q.avg_jct), num(q.avg_ftf),
          num(q.max_ftf));
    } else {  // fill mode never runs a job: no completion times or fairness
      out += fmt::format("{}\n    {{\"name\": {}, \"placed\": {}, \"gpus_at_end\": {}, \"share\": {}}}", i ? "," : "",
                         json_string(q.name), q.finished, num(q.gpu_seconds), num(q.share));
    }
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

std::string sim_decisions_json(const SimResult& r) {
  auto names = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size(); ++i) out += (i ? ", " : "") + json_string(v[i]);
    return out;
  };
  std::string out = "[";
  for (size_t i = 0; i < r.decisions.size(); ++i) {
    const SimStep& s = r.decisions[i];
    out += fmt::format("{}\n  {{\"time\": {}, \"admit\": [{}], \"preempt\": [{}]}}", i ? "," : "", num(s.time),
                       names(s.admitted), names(s.preempted));
  }
  out += r.decisions.empty() ? "]\n" : "\n]\n";
  return out;
}

std::string sim_svg(const SimResult& r) {
  const bool fill = r.mode == "fill";
  SvgChart chart;
  chart.title = fmt::format("GPU allocation rate: policy {} ({})", r.policy, r.mode);
  chart.x_label = fill ? "arrived GPU demand (% of capacity)" : "time since first arrival";
  chart.series.push_back({"allocation", "#1f77b4", r.curve});
  chart.x_min = 0;
  chart.x_max = r.curve.empty() || r.curve.back().first <= 0 ? 1 : r.curve.back().first;
  chart.y_min = 0;
  chart.y_max = 1;
  chart.y_tick = [](double v) { return fmt::format("{:.0f}%", v * 100); };
  chart.x_tick = [fill](double v) { return fill ? fmt::format("{:.0f}%", v * 100) : fmt::format("{:.3g}h", v / 3600); };
  return chart.render();
}

}  // namespace koi::cluster
