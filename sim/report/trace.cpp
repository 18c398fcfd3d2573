// The trace rendering: Chrome's trace-event JSON, which Perfetto and chrome://tracing open.
// A process per variant, a thread per traced GPU and stream. Each slice is an "X" complete
// event whose args say what it did: a kernel's FLOPs, HBM bytes, achieved rates and the SMs
// communication held beside it; a collective's op, message size, group, algorithm/protocol and
// SMs; a pipeline transfer's bytes and the rank on its other side, with a flow arrow ("s" to
// "f") from the sending side's slice to the receiving side's. A counter track ("C") per traced
// GPU follows the SMs and HBM bandwidth its communication holds. Times are microseconds, exact
// to the simulator's nanosecond (three decimals at most).
#include <cmath>
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <utility>

#include "sim/report/report.hpp"

namespace fleetsim {
namespace {

using Json = nlohmann::ordered_json;

// A time in the trace's microseconds: the nanoseconds over 1,000, which a double holds exactly
// enough to print as at most three decimals.
double microseconds(SimTime time) {
  return static_cast<double>(time.ns()) / 1000.0;
}

const char* category(Stream stream) {
  switch (stream) {
    case Stream::compute: return "kernel";
    case Stream::host_copy: return "host copy";
    case Stream::cpu: return "cpu";
    case Stream::pipeline: return "pipeline transfer";
    default: return "collective";
  }
}

// A derived rate to four significant digits: what a person reads, at a fraction of the bytes
// (a trace holds millions of them).
double rate(double value) {
  if (!(value > 0) || !std::isfinite(value)) return 0.0;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(value)));
  return std::round(value * scale) / scale;
}

// A count of FLOPs or bytes, whole.
std::int64_t whole(double count) {
  return std::llround(count);
}

// What the slice did, by its kind (TraceSlice). A kernel without FLOPs (memory-bound) has no
// FLOP arguments.
Json slice_args(const TraceSlice& slice) {
  const double seconds = (slice.end - slice.begin).seconds();
  const auto per_second = [&](double amount) { return seconds > 0 ? rate(amount / seconds) : 0.0; };
  switch (slice.stream) {
    case Stream::compute: {
      Json args;
      if (slice.flops > 0) {
        args["flops"] = whole(slice.flops);
        args["tflop_per_s"] = per_second(slice.flops * 1e-12);
      }
      args["hbm_bytes"] = whole(slice.bytes);
      args["hbm_gb_per_s"] = per_second(slice.bytes * 1e-9);
      args["comm_sms_held"] = slice.sms_held;
      return args;
    }
    case Stream::pipeline:
      return Json{{"bytes", whole(slice.bytes)},
                  {"peer_rank", slice.peer},
                  {"direction", slice.sends ? "send" : "receive"}};
    case Stream::host_copy:
    case Stream::cpu:
      return Json{{"bytes", whole(slice.bytes)}, {"gb_per_s", per_second(slice.bytes * 1e-9)}};
    default:
      return Json{{"op", slice.op},
                  {"bytes", whole(slice.bytes)},
                  {"group", slice.group},
                  {"algorithm", slice.algorithm},
                  {"sms_held", slice.sms_held},
                  {"algbw_gb_per_s", per_second(slice.bytes * 1e-9)}};
  }
}

}  // namespace

std::string render_trace(const RunReport& report) {
  Json events = Json::array();
  const auto variants = static_cast<std::int64_t>(report.variants.size());
  for (std::size_t v = 0; v < report.variants.size(); ++v) {
    const auto& variant = report.variants[v];
    const StepResult& step = variant.outcome.step;
    const int pid = static_cast<int>(v);
    events.push_back(Json{{"name", "process_name"},
                          {"ph", "M"},
                          {"pid", pid},
                          {"args", Json{{"name", variant.name}}}});
    std::set<std::pair<int, int>> tracks;
    // A transfer's two sides, by its number: (sending side's track, receiving side's), and the
    // instant both began.
    std::map<std::int64_t, std::pair<int, int>> transfer_tracks;
    std::map<std::int64_t, SimTime> transfer_begins;
    for (const TraceSlice& slice : step.trace) {
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
                            {"ts", microseconds(slice.begin)},
                            {"dur", microseconds(slice.end - slice.begin)},
                            {"pid", pid},
                            {"tid", tid},
                            {"args", slice_args(slice)}});
      if (slice.transfer >= 0) {
        auto& [from, to] = transfer_tracks.try_emplace(slice.transfer, -1, -1).first->second;
        (slice.sends ? from : to) = tid;
        transfer_begins[slice.transfer] = slice.begin;
      }
    }
    // A flow arrow for each transfer whose two sides are traced (ids unique across variants).
    for (const auto& [transfer, sides] : transfer_tracks) {
      if (sides.first < 0 || sides.second < 0) continue;
      const std::int64_t id = transfer * variants + static_cast<std::int64_t>(v);
      const double ts = microseconds(transfer_begins[transfer]);
      events.push_back(Json{{"name", "pipeline transfer"},
                            {"cat", "pipeline transfer"},
                            {"ph", "s"},
                            {"id", id},
                            {"ts", ts},
                            {"pid", pid},
                            {"tid", sides.first}});
      events.push_back(Json{{"name", "pipeline transfer"},
                            {"cat", "pipeline transfer"},
                            {"ph", "f"},
                            {"bp", "e"},
                            {"id", id},
                            {"ts", ts},
                            {"pid", pid},
                            {"tid", sides.second}});
    }
    // Each traced GPU's communication load, from none at the step's start (unless it begins
    // then).
    std::set<int> counted;
    for (const StepResult::CommLoad& load : step.trace_comm_load) {
      const std::string name = "GPU " + std::to_string(load.rank) + " communication";
      if (counted.insert(load.rank).second && load.at > SimTime{}) {
        events.push_back(Json{{"name", name},
                              {"ph", "C"},
                              {"ts", 0.0},
                              {"pid", pid},
                              {"args", Json{{"sms_held", 0}, {"hbm_gb_per_s", 0.0}}}});
      }
      events.push_back(Json{{"name", name},
                            {"ph", "C"},
                            {"ts", microseconds(load.at)},
                            {"pid", pid},
                            {"args", Json{{"sms_held", load.sms_held},
                                          {"hbm_gb_per_s", rate(load.hbm_bytes_per_s * 1e-9)}}}});
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
