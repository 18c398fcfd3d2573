// `fleetsim run --trace`: the trace's structure as Perfetto's JSON importer reads it (complete
// events with arguments, flow events paired by id, counter events), and --trace-ranks.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>

#include "cli_run.hpp"

namespace fs = std::filesystem;
using namespace fleetsim::testing;  // NOLINT: run_cli and its kin

namespace {

// Two stages of four tensor-parallel ranks, two replicas, on two DGX H100: ranks 0, 1 and 2
// are three of stage 0's first tensor group, rank 8 stage 1's first rank.
const char* const kPipeline = R"(name: trace-pipeline
model: llama3-8b
training: {seq_len: 4096, global_batch: 16, micro_batch: 1}
layout: {tp: 4, pp: 2, dp: 2, zero: 1}
cluster: {node: dgx-h100, nodes: 2, fabric: {kind: rail-fat-tree, link: 400Gbps}}
)";

fs::path scenario_file() {
  const fs::path path = scratch_dir() / "trace-pipeline.yaml";
  std::ofstream(path) << kPipeline;
  return path;
}

// The most decimals any "ts" or "dur" of the trace's text has: the simulator's whole
// nanoseconds give at most three (microseconds to the nanosecond).
std::size_t most_time_decimals(const std::string& text) {
  std::size_t most = 0;
  for (const std::string key : {"\"ts\":", "\"dur\":"}) {
    for (std::size_t at = text.find(key); at != std::string::npos; at = text.find(key, at + 1)) {
      std::size_t end = at + key.size();
      while (end < text.size() && (std::isdigit(text[end]) || text[end] == '.')) ++end;
      const std::string number = text.substr(at + key.size(), end - at - key.size());
      const std::size_t point = number.find('.');
      if (point != std::string::npos) most = std::max(most, number.size() - point - 1);
    }
  }
  return most;
}

}  // namespace

TEST_CASE("a trace's slices say what they did, transfers and collectives flows, loads counters") {
  const fs::path trace = scratch_dir() / "pipeline-trace.json";
  const Result result = run_cli("run " + scenario_file().string() + " -q --no-fold --trace " +
                                trace.string() + " --trace-ranks 0-2,8 --json");
  REQUIRE(result.exit_code == 0);
  const std::string text = slurp(trace);
  CHECK(most_time_decimals(text) <= 3);
  const auto events = nlohmann::json::parse(text)["traceEvents"];
  int kernels_beside_comm = 0;
  std::map<std::string, int> kinds;
  // Each transfer side's and collective's track, from its slices; each flow id's start and
  // finish tracks, and its steps'.
  std::set<std::pair<double, int>> send_tracks, receive_tracks, collective_tracks;
  std::map<std::int64_t, std::pair<int, int>> flows;
  std::map<std::int64_t, std::set<int>> flow_steps;
  std::map<std::int64_t, std::string> flow_kind;
  std::map<std::string, double> last_counter;
  // Counters' values by track and value name, in time order.
  std::map<std::string, std::map<std::string, std::vector<double>>> counters;
  for (const auto& event : events) {
    const std::string ph = event["ph"];
    ++kinds[ph];
    if (ph == "X") {
      const int tid = event["tid"];
      const auto& args = event.at("args");
      const std::string category = event["cat"];
      if (category == "kernel") {
        CHECK(args.at("hbm_bytes").get<std::int64_t>() >= 0);
        CHECK(args.at("comm_sms_held").get<int>() >= 0);
        kernels_beside_comm += args.at("comm_sms_held").get<int>() > 0;
        if (args.contains("flops")) {
          // A GEMM's rate: below the H100's dense BF16 peak.
          CHECK(args.at("tflop_per_s").get<double>() > 0);
          CHECK(args.at("tflop_per_s").get<double>() < 989.5);
        }
      } else if (category == "collective") {
        CHECK(args.at("bytes").get<std::int64_t>() > 0);
        CHECK_FALSE(args.at("op").get<std::string>().empty());
        CHECK(args.at("algorithm").get<std::string>().find('/') != std::string::npos);
        CHECK(args.at("sms_held").get<int>() > 0);
        const std::string group = args.at("group");
        CHECK((group.starts_with("tensor ") || group.starts_with("data ")));
        collective_tracks.insert({event["ts"].get<double>(), tid});
      } else if (category == "pipeline transfer") {
        const int peer = args.at("peer_rank");
        CHECK((peer == 0 || peer == 8 || peer == 9 || peer == 10));
        (args.at("direction") == "send" ? send_tracks : receive_tracks)
            .insert({event["ts"].get<double>(), tid});
      }
    } else if (ph == "s" || ph == "t" || ph == "f") {
      const auto id = event["id"].get<std::int64_t>();
      const std::string kind = event["cat"];
      CHECK(flow_kind.try_emplace(id, kind).first->second == kind);
      auto& sides = flows.try_emplace(id, -1, -1).first->second;
      const int tid = event["tid"];
      if (ph == "t") {
        CHECK(flow_steps[id].insert(tid).second);
      } else {
        int& side = ph == "s" ? sides.first : sides.second;
        CHECK(side == -1);  // one start and one finish an id
        side = tid;
      }
      const int side = tid;
      // A transfer's arrow starts at a send slice and ends at a receive slice of the same
      // instant; a collective's joins its members' slices, which begin together.
      const std::pair<double, int> at{event["ts"].get<double>(), side};
      if (kind == "pipeline transfer") {
        CHECK((ph == "s" ? send_tracks : receive_tracks).count(at) == 1);
      } else {
        CHECK(kind == "collective");
        CHECK(collective_tracks.count(at) == 1);
      }
    } else if (ph == "C") {
      const std::string name = event["name"];
      const double ts = event["ts"];
      if (last_counter.count(name)) CHECK(ts > last_counter[name]);  // one sample an instant
      last_counter[name] = ts;
      for (const auto& [key, value] : event["args"].items()) {
        CHECK(value.get<double>() >= 0);
        counters[name][key].push_back(value.get<double>());
      }
    }
  }
  CHECK(kinds["X"] > 100);
  CHECK(kernels_beside_comm > 0);  // overlapped with ZeRO-1's gradient reduce-scatters
  CHECK(kinds["s"] == kinds["f"]);
  std::map<std::string, int> arrows;
  for (const auto& [id, sides] : flows) {
    CHECK(sides.first >= 0);
    CHECK(sides.second >= 0);
    CHECK(sides.first != sides.second);
    ++arrows[flow_kind[id]];
    // A transfer's arrow joins its two sides; a collective's its three traced members, the
    // middle one a step.
    const std::set<int>& steps = flow_steps[id];
    CHECK(steps.size() == (flow_kind[id] == "collective" ? 1 : 0));
    CHECK(steps.count(sides.first) + steps.count(sides.second) == 0);
  }
  // Every transfer between the traced ranks an arrow: each replica's 8 micro-batches'
  // activations forward and their gradients back (ranks 1 and 2's peers, 9 and 10, are not
  // traced). And each tensor-parallel collective of ranks 0-2 one.
  CHECK(arrows["pipeline transfer"] == 2 * 8);
  CHECK(arrows["collective"] > 8);
  // Communication, memory and link counters for each traced GPU.
  for (const int rank : {0, 1, 2, 8}) {
    const std::string gpu = "GPU " + std::to_string(rank);
    CAPTURE(gpu);
    const auto& communication = counters.at(gpu + " communication");
    for (const double sms : communication.at("sms_held")) CHECK(sms < 132);
    // Saved activations from none to their peak and back to none; the state held all along.
    const auto& memory = counters.at(gpu + " memory");
    const auto& activations = memory.at("activations_gb");
    CHECK(activations.front() == 0);
    CHECK(activations.back() == 0);
    CHECK(*std::max_element(activations.begin(), activations.end()) > 0);
    const auto& state = memory.at("state_gb");
    CHECK(std::all_of(state.begin(), state.end(), [&](double gb) { return gb == state[0]; }));
  }
  // Stage 0 holds two micro-batches at its peak under 1F1B, stage 1 one, of as many layers:
  // twice the activations. Stage 0's peak is the memory verdict's.
  const auto peak = [&](int rank) {
    const auto& gb = counters.at("GPU " + std::to_string(rank) + " memory").at("activations_gb");
    return *std::max_element(gb.begin(), gb.end());
  };
  CHECK(peak(0) == Approx(2 * peak(8)).epsilon(1e-3));
  double verdict = 0;
  const auto report = nlohmann::json::parse(result.out);
  for (const auto& item : report["variants"][0]["memory"]["items"]) {
    if (item["name"] == "activations") verdict = item["bytes"].get<double>() * 1e-9;
  }
  CHECK(peak(0) == Approx(verdict).epsilon(1e-3));
  // The traced GPUs' NVLink ports and their NICs' fabric links, named with their kind and line
  // rate: each from idle to idle, no more than its line rate.
  int nvlink = 0, fabric = 0;
  for (const auto& [name, values] : counters) {
    if (!name.starts_with("link ")) continue;
    nvlink += name.ends_with("(nvlink, 450 GB/s)");
    fabric += name.ends_with("(infiniband, 50 GB/s)");
    CHECK(values.size() == 1);  // one value a counter, which no viewer stacks
    const auto& utilisation = values.at("utilisation");
    CHECK(utilisation.front() == 0);
    CHECK(utilisation.back() == 0);
    for (const double u : utilisation) CHECK(u <= 1);
  }
  CHECK(nvlink == 2 * 4);  // each GPU's port, both ways
  CHECK(fabric >= 2);
}

TEST_CASE("trace ranks: those listed, refused when malformed or not replayed") {
  const std::string scenario = scenario_file().string();
  const fs::path trace = scratch_dir() / "ranks-trace.json";
  REQUIRE(run_cli("run " + scenario + " -q --no-fold --trace " + trace.string() +
                  " --trace-ranks 1-2,9")
              .exit_code == 0);
  std::set<std::string> tracks;
  const auto written = nlohmann::json::parse(slurp(trace));
  for (const auto& event : written["traceEvents"]) {
    if (event["ph"] == "M" && event["name"] == "thread_name") {
      const std::string name = event["args"]["name"];
      tracks.insert(name.substr(0, name.find(' ', 4)));
    }
  }
  CHECK(tracks == std::set<std::string>{"GPU 1", "GPU 2", "GPU 9"});
  for (const std::string bad :
       {"5-2", "1,1", "2,1", "x", "1,", "-1", "0-5000", "''", "0,,1", "99999999999"}) {
    INFO(bad);
    const Result refused =
        run_cli("run " + scenario + " -q --trace " + trace.string() + " --trace-ranks " + bad);
    CHECK(refused.exit_code == 2);
    CHECK(refused.err.find("--trace-ranks") != std::string::npos);
  }
  CHECK(run_cli("run " + scenario + " -q --trace-ranks 0").exit_code == 2);  // no --trace
  // Folded, stage 1's ranks but its first are not replayed: say which stands for them.
  const Result folded =
      run_cli("run " + scenario + " -q --trace " + trace.string() + " --trace-ranks 9");
  CHECK(folded.exit_code == 1);
  CHECK(folded.err.find("rank 8 stands for it") != std::string::npos);
  CHECK(folded.err.find("--no-fold") != std::string::npos);
  const Result far = run_cli("run " + scenario + " -q --no-fold --trace " + trace.string() +
                             " --trace-ranks 2147483647");
  CHECK(far.exit_code == 2);  // refused before anything runs, not counted up to
  const Result outside =
      run_cli("run " + scenario + " -q --no-fold --trace " + trace.string() + " --trace-ranks 99");
  CHECK(outside.exit_code == 2);
  CHECK(outside.err.find("rank 99 is not in variant") != std::string::npos);
  CHECK(outside.err.find("16 ranks (trace ranks 0 to 15)") != std::string::npos);
}
