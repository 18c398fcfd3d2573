// The trace rendering: Chrome's trace-event JSON, which Perfetto and chrome://tracing open.
// A process per variant, a thread per traced GPU and stream. Each slice is an "X" complete
// event whose args say what it did: a kernel's FLOPs, HBM bytes, achieved rates and the SMs
// communication held beside it; a collective's op, message size, group, algorithm/protocol and
// SMs; a pipeline transfer's bytes and the rank on its other side, with a flow arrow ("s" to
// "f") from the sending side's slice to the receiving side's, and one through the traced
// members of each collective ("s", "t"..., "f"). Counters ("C") follow each traced GPU's
// communication (the SMs and HBM bandwidth it holds), its memory in use (what it holds all
// along, and its saved activations as layers' forwards take them and backwards free them), and
// the load on its links and its NIC's. Times are microseconds, exact to the simulator's
// nanosecond (three decimals at most).
//
// A trace holds millions of events: they are written as text one by one, not built as a JSON
// document first (which took several times the memory and time of the text).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sim/report/report.hpp"

namespace fleetsim {
namespace {

// JSON text written into one string: objects and arrays opened and closed in order, their
// members separated as they come.
class JsonText {
 public:
  explicit JsonText(std::string& out) : out_(out) {}

  void open(char bracket) {
    separate();
    out_ += bracket;
    counts_.push_back(0);
  }
  void close(char bracket) {
    out_ += bracket;
    counts_.pop_back();
  }
  void key(std::string_view name) {
    separate();
    out_ += '"';
    out_ += name;  // keys are this file's own names: nothing to escape
    out_ += "\":";
    after_key_ = true;
  }
  void string(std::string_view text) {
    separate();
    bool plain = true;
    for (const char c : text) {
      const auto byte = static_cast<unsigned char>(c);
      plain = plain && byte >= 0x20 && byte < 0x80 && c != '"' && c != '\\';
    }
    if (plain) {
      out_ += '"';
      out_ += text;
      out_ += '"';
    } else {  // escapes, and bytes that are not UTF-8 replaced, as nlohmann writes them
      out_ += nlohmann::json(std::string(text))
                  .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  void number(double value) {
    separate();
    char buffer[32];
    out_.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
  }
  void integer(std::int64_t value) {
    separate();
    char buffer[24];
    out_.append(buffer, std::to_chars(buffer, buffer + sizeof(buffer), value).ptr);
  }
  // A member: its key, then its value.
  void member(std::string_view name, std::string_view text) {
    key(name);
    string(text);
  }
  void member(std::string_view name, const char* text) { member(name, std::string_view(text)); }
  void member(std::string_view name, double value) {
    key(name);
    number(value);
  }
  void member(std::string_view name, std::int64_t value) {
    key(name);
    integer(value);
  }
  void member(std::string_view name, int value) { member(name, std::int64_t{value}); }

 private:
  // A comma before every member but an object's or array's first; none after a key.
  void separate() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!counts_.empty() && counts_.back()++ > 0) out_ += ',';
  }
  std::string& out_;
  std::vector<int> counts_;  // members so far, by open object or array
  bool after_key_ = false;
};

// A time in the trace's microseconds: the nanoseconds over 1,000, which prints as at most three
// decimals.
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

// A derived figure (a rate, gigabytes, a share) to four significant digits: what a person
// reads, at a fraction of the bytes (a trace holds millions of them).
double four_digits(double value) {
  if (!(value > 0) || !std::isfinite(value)) return 0.0;
  const double scale = std::pow(10.0, 3 - std::floor(std::log10(value)));
  return std::round(value * scale) / scale;
}

// A count of FLOPs or bytes, whole.
std::int64_t whole(double count) {
  return std::llround(count);
}

// What the slice did, by its kind (TraceSlice), as the members of its args. A kernel without
// FLOPs (memory-bound) has no FLOP members.
void slice_args(JsonText& json, const TraceSlice& slice) {
  const double seconds = (slice.end - slice.begin).seconds();
  const auto per_second = [&](double amount) {
    return seconds > 0 ? four_digits(amount / seconds) : 0.0;
  };
  switch (slice.stream) {
    case Stream::compute:
      if (slice.flops > 0) {
        json.member("flops", whole(slice.flops));
        json.member("tflop_per_s", per_second(slice.flops * 1e-12));
      }
      json.member("hbm_bytes", whole(slice.bytes));
      json.member("hbm_gb_per_s", per_second(slice.bytes * 1e-9));
      json.member("comm_sms_held", slice.sms_held);
      return;
    case Stream::pipeline:
      json.member("bytes", whole(slice.bytes));
      json.member("peer_rank", slice.peer);
      json.member("direction", slice.sends ? "send" : "receive");
      return;
    case Stream::host_copy:
    case Stream::cpu:
      json.member("bytes", whole(slice.bytes));
      json.member("gb_per_s", per_second(slice.bytes * 1e-9));
      return;
    default:
      json.member("op", slice.op);
      json.member("bytes", whole(slice.bytes));
      json.member("group", slice.group);
      json.member("algorithm", slice.algorithm);
      json.member("sms_held", slice.sms_held);
      json.member("algbw_gb_per_s", per_second(slice.bytes * 1e-9));
      return;
  }
}

// A metadata event naming a process (tid < 0) or a thread.
void name_event(JsonText& json, const char* what, int pid, int tid, std::string_view name) {
  json.open('{');
  json.member("name", what);
  json.member("ph", "M");
  json.member("pid", pid);
  if (tid >= 0) json.member("tid", tid);
  json.key("args");
  json.open('{');
  json.member("name", name);
  json.close('}');
  json.close('}');
}

// A point of a flow arrow ("s" its start, "t" a step, "f" its end), bound to the slice of
// thread `tid` that encloses `ts`.
void flow_event(JsonText& json, const char* what, const char* phase, std::int64_t id, double ts,
                int pid, int tid) {
  json.open('{');
  json.member("name", what);
  json.member("cat", what);
  json.member("ph", phase);
  if (std::string_view(phase) == "f") json.member("bp", "e");
  json.member("id", id);
  json.member("ts", ts);
  json.member("pid", pid);
  json.member("tid", tid);
  json.close('}');
}

// A counter's values from `ts` on: a track for each named value.
void counter_event(JsonText& json, std::string_view name, double ts, int pid,
                   std::initializer_list<std::pair<const char*, double>> values) {
  json.open('{');
  json.member("name", name);
  json.member("ph", "C");
  json.member("ts", ts);
  json.member("pid", pid);
  json.key("args");
  json.open('{');
  for (const auto& [key, value] : values) json.member(key, value);
  json.close('}');
  json.close('}');
}

}  // namespace

std::string render_trace(const RunReport& report) {
  std::string text;
  JsonText json(text);
  json.open('{');
  json.key("traceEvents");
  json.open('[');
  std::int64_t flows = 0;  // flow arrows so far: each one's id
  for (std::size_t v = 0; v < report.variants.size(); ++v) {
    const auto& variant = report.variants[v];
    const StepResult& step = variant.outcome.step;
    const int pid = static_cast<int>(v);
    name_event(json, "process_name", pid, -1, variant.name);
    std::set<std::pair<int, int>> tracks;
    // Where an arrow goes, by the number of the transfer or collective it joins: the instant
    // its slices began, and the tracks of its traced sides (a transfer's sending side, then its
    // receiving one; a collective's members in rank order).
    struct Meeting {
      SimTime begin{};
      std::vector<int> tracks;
    };
    std::map<std::int64_t, Meeting> transfers, collectives;
    for (const TraceSlice& slice : step.trace) {
      const int stream = static_cast<int>(slice.stream);
      const int tid = slice.rank * kStreamCount + stream;
      if (tracks.insert({slice.rank, stream}).second) {
        name_event(json, "thread_name", pid, tid,
                   "GPU " + std::to_string(slice.rank) + " " + to_string(slice.stream));
      }
      json.open('{');
      json.member("name", slice.name);
      json.member("cat", category(slice.stream));
      json.member("ph", "X");
      json.member("ts", microseconds(slice.begin));
      json.member("dur", microseconds(slice.end - slice.begin));
      json.member("pid", pid);
      json.member("tid", tid);
      json.key("args");
      json.open('{');
      slice_args(json, slice);
      json.close('}');
      json.close('}');
      if (slice.transfer >= 0) {
        Meeting& transfer =
            transfers.try_emplace(slice.transfer, Meeting{slice.begin, {-1, -1}}).first->second;
        transfer.tracks[slice.sends ? 0 : 1] = tid;
      }
      if (slice.collective >= 0) {
        collectives.try_emplace(slice.collective, Meeting{slice.begin, {}})
            .first->second.tracks.push_back(tid);
      }
    }
    // An arrow through each transfer's two sides where both are traced, from the sending side,
    // and through each collective's traced members: the ranks that met there.
    const auto arrow = [&](const char* what, const Meeting& meeting) {
      const std::vector<int>& tracks = meeting.tracks;
      if (tracks.size() < 2 || std::count(tracks.begin(), tracks.end(), -1) > 0) return;
      for (std::size_t i = 0; i < tracks.size(); ++i) {
        const char* phase = i == 0 ? "s" : i + 1 < tracks.size() ? "t" : "f";
        flow_event(json, what, phase, flows, microseconds(meeting.begin), pid, tracks[i]);
      }
      ++flows;
    };
    for (const auto& [number, transfer] : transfers) arrow("pipeline transfer", transfer);
    for (const auto& [number, collective] : collectives) arrow("collective", collective);
    // Counters, each from its value before its first sample at the step's start (unless that
    // is then). Each traced GPU's communication load, from none:
    std::set<int> started;
    for (const StepResult::CommLoad& load : step.trace_comm_load) {
      const std::string name = "GPU " + std::to_string(load.rank) + " communication";
      if (started.insert(load.rank).second && load.at > SimTime{}) {
        counter_event(json, name, 0.0, pid, {{"sms_held", 0}, {"hbm_gb_per_s", 0}});
      }
      counter_event(json, name, microseconds(load.at), pid,
                    {{"sms_held", load.sms_held},
                     {"hbm_gb_per_s", four_digits(load.hbm_bytes_per_s * 1e-9)}});
    }
    // its memory in use, from its state alone (none where the replay had no memory model):
    started.clear();
    for (const StepResult::MemoryInUse& memory : step.trace_memory) {
      if (!(memory.state_bytes > 0)) continue;
      const std::string name = "GPU " + std::to_string(memory.rank) + " memory";
      const double state_gb = four_digits(memory.state_bytes * 1e-9);
      if (started.insert(memory.rank).second && memory.at > SimTime{}) {
        counter_event(json, name, 0.0, pid, {{"state_gb", state_gb}, {"activations_gb", 0}});
      }
      counter_event(json, name, microseconds(memory.at), pid,
                    {{"state_gb", state_gb},
                     {"activations_gb", four_digits(memory.activation_bytes * 1e-9)}});
    }
    // and the load on each of its links, from none, as a share of the link's line rate (one
    // value a counter: a viewer may stack a counter's values).
    started.clear();
    for (const StepResult::LinkLoad& load : step.trace_link_load) {
      const LinkUsage& link = step.links.at(load.link);
      char line_rate[32];
      std::snprintf(line_rate, sizeof line_rate, "%.4g GB/s", link.capacity_bytes_per_s * 1e-9);
      const std::string name = "link " + link.name + " (" + link.kind + ", " + line_rate + ")";
      if (started.insert(load.link).second && load.at > SimTime{}) {
        counter_event(json, name, 0.0, pid, {{"utilisation", 0}});
      }
      counter_event(json, name, microseconds(load.at), pid,
                    {{"utilisation", four_digits(load.bytes_per_s / link.capacity_bytes_per_s)}});
    }
  }
  json.close(']');
  json.member("displayTimeUnit", "ms");
  json.key("otherData");
  json.open('{');
  json.member("scenario", report.scenario_name);
  json.member("file", report.scenario_file);
  json.member("fleetsim_version", report.fleetsim_version);
  json.close('}');
  json.close('}');
  text += '\n';
  return text;
}

}  // namespace fleetsim
