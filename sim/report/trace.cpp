// The trace rendering: Chrome's trace-event JSON (the "X" complete events and "M" metadata
// events of its format), which Perfetto and chrome://tracing open. Times are microseconds.
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "sim/report/report.hpp"

namespace fleetsim {
namespace {

using Json = nlohmann::ordered_json;

}  // namespace

std::string render_trace(const RunReport& report) {
  Json events = Json::array();
  for (std::size_t v = 0; v < report.variants.size(); ++v) {
    const auto& variant = report.variants[v];
    const int pid = static_cast<int>(v);
    events.push_back(Json{{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"args", Json{{"name", variant.name}}}});
    std::set<std::pair<int, int>> tracks;
    // Kernels, collectives, and optimizer offload's copies and CPU work.
    const auto category = [](Stream stream) {
      switch (stream) {
        case Stream::compute: return "kernel";
        case Stream::host_copy: return "host copy";
        case Stream::cpu: return "cpu";
        default: return "collective";
      }
    };
    for (const TraceSlice& slice : variant.outcome.step.trace) {
      const int stream = static_cast<int>(slice.stream);
      const int tid = slice.rank * kStreamCount + stream;
      if (tracks.insert({slice.rank, stream}).second) {
        events.push_back(Json{{"name", "thread_name"},
                              {"ph", "M"},
                              {"pid", pid},
                              {"tid", tid},
                              {"args", Json{{"name", "GPU " + std::to_string(slice.rank) + " " +
                                                         to_string(slice.stream)}}}});
      }
      events.push_back(Json{{"name", slice.name},
                            {"cat", category(slice.stream)},
                            {"ph", "X"},
                            {"ts", slice.begin.seconds() * 1e6},
                            {"dur", (slice.end - slice.begin).seconds() * 1e6},
                            {"pid", pid},
                            {"tid", tid}});
    }
  }
  const Json trace{{"traceEvents", events},
                   {"displayTimeUnit", "ms"},
                   {"otherData", Json{{"scenario", report.scenario_name},
                                      {"file", report.scenario_file},
                                      {"fleetsim_version", report.fleetsim_version}}}};
  return trace.dump() + "\n";
}

}  // namespace fleetsim
