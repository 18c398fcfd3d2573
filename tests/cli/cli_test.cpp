// The fleetsim executable end to end: exit codes, one-line errors with locations, outputs.
#include <sys/resource.h>
#include <sys/wait.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include <sstream>
#include <string>
#include "cli_run.hpp"
#include "sim/scenario/scenario.hpp"

namespace fs = std::filesystem;
using namespace fleetsim::testing;  // NOLINT: run_cli and its kin

namespace {

fs::path write_scenario(const std::string& name, const std::string& text) {
  const fs::path path = scratch_dir() / name;
  std::ofstream(path) << text;
  return path;
}

const char* const kValid = R"(name: cli-test
model: llama3-8b
training: {method: full, precision: bf16, optimizer: adam, seq_len: 4096, global_batch: 16, micro_batch: 2}
layout: {dp: 8, zero: 3}
cluster:
  node: dgx-h100
  fabric: {kind: rail-fat-tree, link: 400Gbps}
)";

std::string with_line(std::string text, const std::string& from, const std::string& to) {
  text.replace(text.find(from), from.size(), to);
  return text;
}

// An error is one line, starts with "error: ", and names the file with a line and column.
void check_one_line_error(const Result& result, const fs::path& file, const std::string& expect) {
  CHECK(result.exit_code == 2);
  CHECK(result.out.empty());
  CHECK(result.err.rfind("error: ", 0) == 0);
  CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
  CHECK(result.err.find(file.string() + ":") != std::string::npos);
  CHECK(result.err.find(expect) != std::string::npos);
}

}  // namespace

TEST_CASE("the version and help flags exit 0") {
  const Result version = run_cli("--version");
  CHECK(version.exit_code == 0);
  CHECK(version.out.rfind("fleetsim ", 0) == 0);
  const Result help = run_cli("--help");
  CHECK(help.exit_code == 0);
  CHECK(help.out.find("run FILE") != std::string::npos);
}

TEST_CASE("list shows every shipped node preset and GPU profile, each on a line of its own") {
  // Each file of topology/presets and calibration/profiles is listed by name at the start of a
  // line (two spaces in, then padding): a name found only inside another (b200 in dgx-b200)
  // does not count.
  const Result result = run_cli("list");
  REQUIRE(result.exit_code == 0);
  const fs::path source = FLEETSIM_SOURCE_DIR;
  int listed = 0;
  for (const char* directory : {"topology/presets", "calibration/profiles"}) {
    for (const auto& entry : fs::directory_iterator(source / directory)) {
      if (entry.path().extension() != ".yaml") continue;
      const std::string name = entry.path().stem().string();
      CAPTURE(name);
      CHECK(result.out.find("\n  " + name + " ") != std::string::npos);
      ++listed;
    }
  }
  CHECK(listed == 22 + 16);  // node presets, GPU profiles
  for (const char* model : {"llama3-8b", "llama3-70b"}) {
    CHECK(result.out.find("\n  " + std::string(model) + " ") != std::string::npos);
  }
}

TEST_CASE("bad command lines exit 2") {
  CHECK(run_cli("frobnicate x.yaml").exit_code == 2);
  CHECK(run_cli("run").exit_code == 2);
  CHECK(run_cli("run x.yaml --no-such-flag").exit_code == 2);
}

TEST_CASE("a missing scenario file is a one-line error, exit 2") {
  const fs::path missing = scratch_dir() / "does-not-exist.yaml";
  const Result result = run_cli("run " + missing.string());
  CHECK(result.exit_code == 2);
  CHECK(result.err.find(missing.string()) != std::string::npos);
  CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
}

TEST_CASE("a YAML syntax error names its line") {
  const fs::path file = write_scenario(
      "syntax.yaml", with_line(kValid, "layout: {dp: 8, zero: 3}", "layout: {dp: 8, zero: 3"));
  check_one_line_error(run_cli("run " + file.string()), file, file.string() + ":");
}

TEST_CASE("an unknown key names the key, its line and column") {
  const fs::path file = write_scenario(
      "unknown.yaml",
      with_line(kValid, "layout: {dp: 8, zero: 3}", "layout: {dp: 8, zero: 3, zer0: 1}"));
  const Result result = run_cli("validate " + file.string());
  check_one_line_error(result, file, ":4:");
  CHECK(result.err.find("zer0") != std::string::npos);
}

TEST_CASE("a negative bandwidth is rejected with its location") {
  const fs::path file =
      write_scenario("negative.yaml", with_line(kValid, "link: 400Gbps", "link: -400Gbps"));
  const Result result = run_cli("run " + file.string());
  check_one_line_error(result, file, ":7:");
  CHECK(result.err.find("cluster.fabric.link") != std::string::npos);
}

TEST_CASE("an unknown preset lists the ones that exist") {
  const fs::path file =
      write_scenario("preset.yaml", with_line(kValid, "node: dgx-h100", "node: dgx-h900"));
  const Result result = run_cli("run " + file.string());
  check_one_line_error(result, file, ":6:");
  CHECK(result.err.find("dgx-b200") != std::string::npos);
}

TEST_CASE("the shipped scenario runs, writes HDF5 and JSON, and repeats exactly") {
  const std::string scenario = std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/h100-vs-b200.yaml";
  const fs::path h5 = scratch_dir() / "result.h5";
  fs::remove(h5);
  const Result table = run_cli("run " + scenario + " -o " + h5.string());
  REQUIRE(table.exit_code == 0);
  CHECK(table.out.find("dgx-h100") != std::string::npos);
  CHECK(table.out.find("dgx-b200") != std::string::npos);
  CHECK(fs::file_size(h5) > 0);

  // Same numbers on one thread and on several: variants are simulated concurrently only when
  // more than one thread is allowed.
  const Result first = run_cli("run " + scenario + " --json --threads 1");
  const Result second = run_cli("run " + scenario + " --json --threads 4");
  REQUIRE(first.exit_code == 0);
  CHECK(first.out == second.out);
  const auto json = nlohmann::json::parse(first.out);
  REQUIRE(json["variants"].size() == 2);
  for (const auto& variant : json["variants"]) {
    const double mfu = variant["step"]["mfu"];
    CHECK(mfu > 0.0);
    CHECK(mfu < 1.0);
    CHECK(variant["memory"]["fits"] == true);
  }
  const double h100 = json["variants"][0]["step"]["step_time_s"];
  const double b200 = json["variants"][1]["step"]["step_time_s"];
  CHECK(b200 < h100);
}

namespace {

// Structural equality with numbers compared to a relative 1e-9: a golden file must not break on
// the last bit of a sum, but any change of the model shows.
void check_same(const nlohmann::json& expected, const nlohmann::json& actual,
                const std::string& path) {
  INFO(path);
  REQUIRE(expected.type() == actual.type());
  if (expected.is_object()) {
    REQUIRE(expected.size() == actual.size());
    for (const auto& [key, value] : expected.items()) {
      REQUIRE(actual.contains(key));
      check_same(value, actual[key], path + "." + key);
    }
  } else if (expected.is_array()) {
    REQUIRE(expected.size() == actual.size());
    for (std::size_t i = 0; i < expected.size(); ++i) {
      check_same(expected[i], actual[i], path + "[" + std::to_string(i) + "]");
    }
  } else if (expected.is_number()) {
    CHECK(actual.get<double>() == Approx(expected.get<double>()).epsilon(1e-9).margin(1e-12));
  } else {
    CHECK(expected == actual);
  }
}

}  // namespace

TEST_CASE("fleetsim run --trace writes a Perfetto trace whose slices add up to the compute time") {
  // Each traced rank's compute stream is serial: its slices do not overlap, and their total is
  // the rank's compute time, which (all ranks alike under ZeRO-3) is the reported average.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const fs::path trace = scratch_dir() / "trace.json";
  // Unfolded, so that every GPU has its tracks (folded, rank 0 alone is replayed).
  const Result result = run_cli("run " + source + "/scenarios/h100-vs-b200.yaml --json --no-fold " +
                                "--trace " + trace.string());
  REQUIRE(result.exit_code == 0);
  const auto report = nlohmann::json::parse(result.out);
  const auto events = nlohmann::json::parse(slurp(trace))["traceEvents"];
  for (int variant = 0; variant < 2; ++variant) {
    INFO("variant " << variant);
    double compute_us = 0, last_end = 0;
    int slices = 0;
    std::set<int> tracks;
    for (const auto& event : events) {
      if (event["ph"] != "X" || event["pid"] != variant) continue;
      tracks.insert(event["tid"].get<int>());
      if (event["tid"] != 0) continue;  // GPU 0, compute
      CHECK(event["ts"].get<double>() >= last_end - 1e-3);
      last_end = event["ts"].get<double>() + event["dur"].get<double>();
      compute_us += event["dur"].get<double>();
      ++slices;
    }
    CHECK(slices > 1000);
    CHECK(tracks.size() == 8 * 3);  // 8 GPUs x compute, gather, reduce
    const auto& step = report["variants"][variant]["step"];
    CHECK(compute_us * 1e-6 == Approx(step["compute_s"].get<double>()).epsilon(1e-6));
    CHECK(last_end * 1e-6 <= step["step_time_s"].get<double>() * (1 + 1e-9));
  }
  CHECK(run_cli("validate " + source + "/scenarios/h100-vs-b200.yaml --trace " + trace.string())
            .exit_code == 2);
  // Folded, the same step from one replayed GPU of eight, whose tracks alone are written.
  const Result folded =
      run_cli("run " + source + "/scenarios/h100-vs-b200.yaml --json --trace " + trace.string());
  REQUIRE(folded.exit_code == 0);
  const auto folded_report = nlohmann::json::parse(folded.out);
  std::set<int> folded_tracks;
  const auto folded_trace = nlohmann::json::parse(slurp(trace));
  for (const auto& event : folded_trace["traceEvents"]) {
    if (event["ph"] == "X" && event["pid"].get<int>() == 0) {
      folded_tracks.insert(event["tid"].get<int>());
    }
  }
  CHECK(folded_tracks.size() == 3);
  for (int variant = 0; variant < 2; ++variant) {
    CHECK(folded_report["variants"][variant]["step"]["step_time_s"].get<double>() ==
          report["variants"][variant]["step"]["step_time_s"].get<double>());
  }
}

TEST_CASE("fleetsim memory prints the memory per GPU, and exits 1 for a layout that does not fit") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result fits = run_cli("memory " + source + "/scenarios/h100-vs-b200.yaml");
  REQUIRE(fits.exit_code == 0);
  CHECK(fits.out.find("memory per GPU at peak (GB") != std::string::npos);
  CHECK(fits.out.find("peak at") != std::string::npos);
  CHECK(fits.out.find("total (peak reserved)") != std::string::npos);
  CHECK(fits.out.find("peak allocated (less fragmentation)") != std::string::npos);
  CHECK(fits.out.find("headroom (%, 15-30 kept free in practice)") != std::string::npos);
  CHECK(fits.out.find("what each item assumes") != std::string::npos);
  CHECK(fits.out.find("step time") == std::string::npos);  // nothing replayed
  // Llama-3-70B with plain data parallelism on 8 H100: 18 bytes per parameter replicated.
  const fs::path file = scratch_dir() / "too-big.yaml";
  std::ofstream(file) << "name: too-big\nmodel: llama3-70b\n"
                         "training: {seq_len: 4096, global_batch: 64, micro_batch: 1}\n"
                         "layout: {dp: 8, zero: 0}\ncluster: {node: dgx-h100}\n";
  const Result too_big = run_cli("memory " + file.string());
  CHECK(too_big.exit_code == 1);
  CHECK(too_big.out.find("does not fit: needs") != std::string::npos);
  CHECK(too_big.out.find("over by") != std::string::npos);
}

TEST_CASE("the shipped Llama 3 405B run trains in its published layout, which fits an H100") {
  // tp 8, pp 16 interleaved, dp 128 with optimizer states and gradients sharded, no
  // recomputation (arXiv:2407.21783 Section 3.3): the warm-up's 16 micro-batches of 8 layers
  // (68 GB) beside whole BF16 weights fit only with the gradients sharded (ZeRO 2); ZeRO 1's
  // whole FP32 gradient buffer (12.75 GB more) does not.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result result = run_cli("memory " + source + "/scenarios/llama3-405b-16k-run.yaml");
  CHECK(result.exit_code == 0);
  CHECK(result.out.find("tp8 pp16 vpp4 dp128 zero2 recompute=none") != std::string::npos);
  CHECK(result.out.find("does not fit") == std::string::npos);
  const fs::path zero1 = scratch_dir() / "llama3-405b-zero1.yaml";
  std::ifstream in(source + "/scenarios/llama3-405b-16k-run.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("zero: 2"), 7, "zero: 1");
  std::ofstream(zero1) << text;
  const Result whole = run_cli("memory " + zero1.string());
  CHECK(whole.exit_code == 1);
  CHECK(whole.out.find("does not fit") != std::string::npos);
}

TEST_CASE("Llama-3-70B on one node: full fine-tuning fits B200 and MI300X, LoRA fits H100 too") {
  // 70B parameters at 16 bytes (1.13 TB) of model states under DeepSpeed's ZeRO-3 (BF16
  // gradient partitions): 141 GB per GPU sharded eight ways, more than an H100's 80 GB whatever
  // the activations; B200 and MI300X (192 GB) fit.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result result = run_cli("run " + source + "/scenarios/llama3-70b-one-node.yaml --json");
  CHECK(result.exit_code == 1);  // some layouts do not fit
  std::map<std::string, bool> simulated;
  const auto report = nlohmann::json::parse(result.out);
  for (const auto& variant : report["variants"]) {
    simulated[variant["name"].get<std::string>()] = variant["simulated"].get<bool>();
  }
  CHECK_FALSE(simulated.at("h100 zero3 recompute"));
  CHECK_FALSE(simulated.at("h100 tp8 zero1 recompute"));
  CHECK(simulated.at("h100 zero3 recompute offload"));  // states in host memory
  CHECK(simulated.at("h100 lora zero3 recompute"));     // frozen weights: 2 bytes per parameter
  CHECK(simulated.at("b200 zero3 recompute"));
  CHECK(simulated.at("b200 tp8 zero1"));
  CHECK(simulated.at("mi300x zero3 recompute"));
  CHECK(simulated.at("mi300x tp8 zero1"));
}

// One shipped scenario's summary against tests/golden/<name>.json, the scenario named by the
// environment's FLEETSIM_GOLDEN: CMake adds one test per scenario (ctest -R golden), so they run
// in parallel. When a model changes on purpose, tools/refresh-golden.sh rewrites the files.
TEST_CASE("a shipped scenario matches its golden summary", "[.golden]") {
  const char* name = std::getenv("FLEETSIM_GOLDEN");
  REQUIRE(name != nullptr);
  const fs::path source = FLEETSIM_SOURCE_DIR;
  const fs::path golden_file = source / "tests/golden" / (std::string(name) + ".json");
  INFO("no " << golden_file.string() << ": tools/refresh-golden.sh writes it");
  REQUIRE(fs::exists(golden_file));
  const Result result =
      run_cli("run " + (source / "scenarios" / (std::string(name) + ".yaml")).string() +
              " --json --summary -q");
  // 1: a variant does not fit, which a scenario may show on purpose.
  REQUIRE((result.exit_code == 0 || result.exit_code == 1));
  const auto golden = nlohmann::json::parse(slurp(golden_file));
  check_same(golden["variants"], nlohmann::json::parse(result.out)["variants"], "variants");
}

TEST_CASE(
    "the 70B scaling scenario loses efficiency only where rings cross the oversubscribed spine") {
  // 4:1 leaves of 25 nodes, spread placement: up to 16 nodes the job sits under one leaf per
  // rail and scales; at 32 and 64 nodes every ring hop between nodes crosses the spine. Packing
  // the 64 nodes leaf by leaf, or a non-blocking fabric, brings the scaling back, all but the
  // 2-3% that ZeRO-3's longer rings cost the compute beside them (their kernels hold SMs).
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result result = run_cli("run " + source + "/scenarios/llama3-70b-dp-scaling.yaml --json");
  REQUIRE(result.exit_code == 0);
  std::map<std::string, double> efficiency;
  const auto json = nlohmann::json::parse(result.out);
  for (const auto& variant : json["variants"]) {
    efficiency[variant["name"]] = variant["scaling_efficiency_vs_first"].get<double>();
  }
  REQUIRE(efficiency.size() == 9);
  for (const char* within_one_leaf : {"4 nodes", "8 nodes", "16 nodes"}) {
    CHECK(efficiency[within_one_leaf] == Approx(1).epsilon(0.01));
  }
  CHECK(efficiency["32 nodes"] < 0.97);
  CHECK(efficiency["64 nodes"] < efficiency["32 nodes"]);
  CHECK(efficiency["64 packed"] == Approx(1).epsilon(0.03));
  // Twice the nodes packed lose under a quarter of what 32 spread ones lose: the spine's share.
  CHECK(1 - efficiency["64 packed"] < 0.25 * (1 - efficiency["32 nodes"]));
  CHECK(efficiency["64 non-blocking"] == Approx(efficiency["64 packed"]).epsilon(1e-3));
  // Hash collisions on the spread rings cost what adaptive routing avoids.
  CHECK(efficiency["64 non-blocking hash"] < 0.95 * efficiency["64 non-blocking"]);
}

TEST_CASE("fleetsim plan ranks layouts of the scenario's model and cluster, fastest first") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const std::string scenario = source + "/scenarios/h100-vs-b200.yaml";
  const Result result = run_cli("plan " + scenario + " --top 3 --json --threads 1");
  REQUIRE(result.exit_code == 0);
  auto plan = nlohmann::json::parse(result.out);
  // The same layouts replayed and ranked, to the bit, on 1, 2 and 4 threads: batches of fixed
  // sizes, whatever runs them (the search's own wall time aside), the bound pruning between
  // batches as it does on one.
  CHECK(plan["plan"]["bounded_out"].get<int>() > 0);
  CHECK(plan["plan"]["replayed"].get<int>() > 3);  // more than the first batch
  for (const int threads : {2, 4}) {
    CAPTURE(threads);
    const Result more =
        run_cli("plan " + scenario + " --top 3 --json --threads " + std::to_string(threads));
    REQUIRE(more.exit_code == 0);
    auto on_more = nlohmann::json::parse(more.out);
    on_more["plan"].erase("search_s");
    auto on_one = plan;
    on_one["plan"].erase("search_s");
    CHECK(on_more == on_one);
  }
  const auto& variants = plan["variants"];
  REQUIRE(variants.size() == 3);
  const auto& summary = plan["plan"];
  CHECK(summary["layouts"].get<int>() + summary["offload_alternatives"].get<int>() ==
        summary["refused"].get<int>() + summary["not_fitting"].get<int>() +
            summary["replayed"].get<int>() + summary["bounded_out"].get<int>());
  for (std::size_t i = 1; i < variants.size(); ++i) {
    CHECK(variants[i - 1]["step"]["step_time_s"].get<double>() <=
          variants[i]["step"]["step_time_s"].get<double>());
  }
  // The scenario's own layout (dp 8, ZeRO-3, micro-batch 2) is among those searched: the best
  // is no slower.
  const auto run = nlohmann::json::parse(run_cli("run " + scenario + " --json").out);
  CHECK(variants[0]["step"]["step_time_s"].get<double>() <=
        run["variants"][0]["step"]["step_time_s"].get<double>());
  const Result table = run_cli("plan " + scenario + " --top 3");
  CHECK(table.exit_code == 0);
  CHECK(table.out.find("1. ") != std::string::npos);
  CHECK(table.out.find("layouts: ") != std::string::npos);
  CHECK(run_cli("plan " + scenario + " --top 0").exit_code == 2);
  CHECK(run_cli("run " + scenario + " --top 3").exit_code == 2);
  CHECK(run_cli("plan " + scenario + " --top -1").exit_code == 2);
  // --min-headroom: a percentage, plan's alone; the layouts ranked leave that much free.
  const Result roomy = run_cli("plan " + scenario + " --top 3 --min-headroom 40% --json");
  REQUIRE(roomy.exit_code == 0);
  const auto roomy_plan = nlohmann::json::parse(roomy.out);
  CHECK(roomy_plan["plan"]["min_headroom"].get<double>() == Approx(0.40));
  CHECK(roomy_plan["plan"]["not_fitting"].get<int>() >= summary["not_fitting"].get<int>());
  for (const auto& variant : roomy_plan["variants"]) {
    CHECK(variant["memory"]["headroom_fraction"].get<double>() >= 0.40);
  }
  for (const std::string bad : {"15", "100%", "-5%", "abc%", "nan%"}) {
    INFO(bad);
    const Result refused = run_cli("plan " + scenario + " --min-headroom " + bad);
    CHECK(refused.exit_code == 2);
    CHECK(refused.err.find("--min-headroom") != std::string::npos);
  }
  CHECK(run_cli("run " + scenario + " --min-headroom 15%").exit_code == 2);
  // Llama-3-70B's full fine-tune on one H100 node fits only with the optimizer offloaded.
  const Result offloaded =
      run_cli("plan " + source + "/scenarios/llama3-70b-one-node.yaml --top 1 --json");
  CHECK(offloaded.exit_code == 0);
  const auto offloaded_report = nlohmann::json::parse(offloaded.out);
  REQUIRE(offloaded_report["variants"].size() == 1);
  CHECK(offloaded_report["variants"][0]["layout"]["offload_optimizer"] == true);
  // On a DGX A100 (80 GB), whose preset does not describe its host, nothing fits: exit 1, the
  // leanest named.
  const fs::path a100 =
      write_scenario("a100-70b.yaml",
                     "name: a100-70b\nmodel: llama3-70b\n"
                     "training: {seq_len: 4096, global_batch: 64, micro_batch: 1}\n"
                     "layout: {dp: 8, zero: 3}\ncluster: {node: dgx-a100}\n");
  const Result none = run_cli("plan " + a100.string() + " --json");
  CHECK(none.exit_code == 1);
  const auto none_report = nlohmann::json::parse(none.out);
  CHECK(none_report["variants"].empty());
  CHECK(none_report["plan"]["leanest"]["memory"]["fits"] == false);
  CHECK(run_cli("plan " + scenario + " --trace x.json").exit_code == 2);
}

TEST_CASE("every shipped scenario validates, and QLoRA fits every GPU, LoRA the 192 GB ones") {
  const std::filesystem::path source = FLEETSIM_SOURCE_DIR;
  int scenarios = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source / "scenarios")) {
    if (entry.path().extension() != ".yaml") continue;
    INFO(entry.path().string());
    CHECK(run_cli("validate " + entry.path().string()).exit_code == 0);
    ++scenarios;
  }
  CHECK(scenarios >= 7);
  // QLoRA fits every GPU; LoRA's BF16 70B weights fit only the 192 GB parts.
  const Result adapters =
      run_cli("run " + (source / "scenarios/llama3-70b-lora-one-gpu.yaml").string() + " --json");
  CHECK(adapters.exit_code == 1);  // two variants do not fit
  std::map<std::string, bool> fits;
  const auto report = nlohmann::json::parse(adapters.out);
  for (const auto& variant : report["variants"]) {
    fits[variant["name"].get<std::string>()] = variant["simulated"].get<bool>();
  }
  const std::map<std::string, bool> expected{
      {"h100 qlora", true},   {"h200 qlora", true},  {"b200 qlora", true},
      {"mi300x qlora", true}, {"h100 lora", false},  {"h200 lora", false},
      {"b200 lora", true},    {"mi300x lora", true}, {"h100 qdora", true}};
  CHECK(fits == expected);
  // The console names each variant's method.
  const Result table =
      run_cli("run " + (source / "scenarios/llama3-70b-lora-one-gpu.yaml").string());
  CHECK_THAT(table.out, Catch::Contains("llama3-70b (QLoRA rank 16)"));
  CHECK_THAT(table.out, Catch::Contains("llama3-70b (LoRA rank 16)"));
  CHECK_THAT(table.out, Catch::Contains("llama3-70b (QDoRA rank 16)"));
  // An item only the last variant has is listed where the memory model puts it, after the
  // dequantized weight and before the logits, not at the end.
  const std::size_t norm = table.out.find("  DoRA weight norm");
  REQUIRE(norm != std::string::npos);
  CHECK(table.out.find("  dequantized weight") < norm);
  CHECK(norm < table.out.find("  logits"));
}

TEST_CASE("a scenario with a run: block prints and writes the run's Monte Carlo") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const std::string file = source + "/scenarios/llama3-70b-pretraining-run.yaml";
  const Result table = run_cli("run " + file);
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("time to train P50 / P90 (days)"));
  CHECK_THAT(table.out, Catch::Contains("goodput, mean (99% CI)"));
  // Not on a terminal, no progress bar: stderr stays clean for scripts, with -q or without.
  CHECK(table.err.empty());
  const Result json = run_cli("run " + file + " --json -q");
  REQUIRE(json.exit_code == 0);
  CHECK(json.err.empty());
  const auto variants = nlohmann::json::parse(json.out)["variants"];
  REQUIRE(variants.size() == 6);
  for (const auto& variant : variants) {
    const auto& run = variant["run"];
    REQUIRE(run.is_object());
    CHECK(run["replications"] == 1000);
    CHECK(run["goodput"]["mean"].get<double>() > 0.9);
    CHECK(run["goodput"]["mean"].get<double>() < 1.0);
    CHECK(run["wall_s"]["p90"].get<double>() >= run["wall_s"]["p50"].get<double>());
    CHECK(run["wall_s"]["mean"].get<double>() > run["useful_s"].get<double>());
  }
  // Common random numbers: the three policies see one interruption history each replication,
  // so the Young-Daly interval's goodput is not below the others' by noise.
  CHECK(variants[0]["run"]["goodput"]["mean"].get<double>() >=
        variants[2]["run"]["goodput"]["mean"].get<double>());
  // The spot variants: their preemptions, at the spot price.
  CHECK(variants[0]["run"]["spot"].is_null());
  for (int spot = 3; spot < 6; ++spot) {
    REQUIRE(variants[spot]["run"]["spot"].is_object());
    CHECK(variants[spot]["run"]["spot"]["preemptions"]["mean"].get<double>() > 1);
    CHECK(variants[spot]["run"]["usd_per_gpu_hour"] == 1.52);
  }
  // Cost per million tokens: the run's cost over its trillion tokens.
  const auto& first = variants[0]["run"];
  CHECK(first["usd_per_million_tokens"]["mean"].get<double>() ==
        Approx(first["cost_usd"]["mean"].get<double>() /
               (first["steps"].get<double>() * 512 * 8192) * 1e6));
}

TEST_CASE("a run's shrunk and degraded steps come from the step executor") {
  // Llama-3-8B on 4 nodes, dp 4 of 8-GPU replicas (tp 8): one replica short is 3 nodes and 3/4
  // of the batch; a GPU 20% slow stretches the step, a link at half rate too (ZeRO-1 traffic
  // crosses the NICs).
  const fs::path file = write_scenario("degraded.yaml", R"(name: degraded
model: llama3-8b
training: {seq_len: 4096, global_batch: 64, micro_batch: 2, tokens: 1e10}
layout: {tp: 8, dp: 4, zero: 1}
cluster: {node: dgx-h100, nodes: 4, storage: {write: 50GB/s, read: 100GB/s}}
run:
  interruptions: llama3-405b
  detection: 5min
  restart: 10min
  node_repair: 8h
  when_short: shrink
  replications: 20
  degraded:
    - {cause: slow GPU, slows: compute, fraction: 0.2, per_gpu_day: 0.001, source: 'assumed: a test'}
    - {cause: slow link, slows: network, fraction: 0.5, per_gpu_day: 0.001, source: 'assumed: a test'}
)");
  const Result result = run_cli("run " + file.string() + " --json -q");
  REQUIRE(result.exit_code == 0);
  const auto variant = nlohmann::json::parse(result.out)["variants"][0];
  const double step = variant["step"]["step_time_s"].get<double>();
  const auto& run = variant["run"];
  CHECK(run["replicas"] == 4);
  // Three replicas run three quarters of the batch in about the same time.
  CHECK(run["shrunk_step_s"].get<double>() > 0.8 * step);
  CHECK(run["shrunk_step_s"].get<double>() <= step * 1.001);
  const double slow_gpu = run["degradations"][0]["step_s"].get<double>();
  const double slow_link = run["degradations"][1]["step_s"].get<double>();
  // Compute kernels 20% slower: the step by less (memory-bound kernels, exposed communication).
  CHECK(slow_gpu > 1.05 * step);
  CHECK(slow_gpu < 1.2 * step * 1.001);
  CHECK(slow_link > step);
}

TEST_CASE("plan ranks a run's layouts by their expected cost to train") {
  const std::string file =
      std::string(FLEETSIM_SOURCE_DIR) + "/scenarios/llama3-70b-pretraining-run.yaml";
  const Result table = run_cli("plan " + file + " --top 3 -q");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("ranked by the run's expected cost to train"));
  CHECK_THAT(table.out, Catch::Contains("cost P50 / P90 (USD)"));
  const Result json = run_cli("plan " + file + " --top 3 --json -q");
  REQUIRE(json.exit_code == 0);
  const auto variants = nlohmann::json::parse(json.out)["variants"];
  REQUIRE(variants.size() == 3);
  double last = 0;
  for (const auto& variant : variants) {
    const double cost = variant["run"]["cost_usd"]["mean"].get<double>();
    CHECK(cost >= last);
    last = cost;
    // Each layout's run is its own: the steps the same, the time to train its step's.
    CHECK(variant["run"]["useful_s"].get<double>() ==
          Approx(variant["run"]["steps"].get<double>() *
                 variant["step"]["step_time_s"].get<double>()));
  }
}

TEST_CASE("sweep prints a row per point, scaling each node type from its smallest point") {
  const fs::path file = write_scenario("sweep.yaml", R"(name: sweep
model: llama3-8b
training: {seq_len: 4096, global_batch: 256, micro_batch: 2}
layout: {dp: auto, tp: 8, zero: 1}
cluster: {node: dgx-h100, nodes: 1}
sweep:
  grid:
    cluster.nodes: [1, 2, 4]
    cluster.node: [dgx-h100, dgx-b200]
)");
  const Result table = run_cli("sweep " + file.string() + " -q");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("cluster.nodes=4, cluster.node=dgx-b200"));
  CHECK_THAT(table.out, Catch::Contains("scaling efficiency"));
  // The same numbers on one thread as on two, in the same order.
  const Result one = run_cli("run " + file.string() + " --json -q --threads 1");
  const Result two = run_cli("run " + file.string() + " --json -q --threads 2");
  REQUIRE(one.exit_code == 0);
  CHECK(one.out == two.out);
  const auto points = nlohmann::json::parse(one.out)["variants"];
  REQUIRE(points.size() == 6);
  // Weak scaling of the batch's tokens over more H100 nodes: per-GPU throughput does not rise.
  const double one_node = points[0]["step"]["tokens_per_s"].get<double>() / 8;
  const double four_nodes = points[4]["step"]["tokens_per_s"].get<double>() / 32;
  CHECK(four_nodes <= one_node * 1.0001);
  CHECK(four_nodes > 0.9 * one_node);
  // Each node type scales from its own smallest point.
  CHECK(points[0]["scaling_efficiency_in_sweep"] == 1.0);
  CHECK(points[1]["scaling_efficiency_in_sweep"] == 1.0);
  CHECK(points[4]["scaling_efficiency_in_sweep"].get<double>() == Approx(four_nodes / one_node));
  // CSV for scripts: a header with the swept paths, a line per point, names quoted.
  const Result csv = run_cli("sweep " + file.string() + " --csv -q");
  REQUIRE(csv.exit_code == 0);
  CHECK_THAT(csv.out,
             Catch::StartsWith("name,group,sweep.cluster.nodes,sweep.cluster.node,index,node,"));
  CHECK_THAT(csv.out, Catch::Contains("\n\"cluster.nodes=4, cluster.node=dgx-b200\","
                                      "cluster.nodes_4_cluster.node_dgx-b200,4,dgx-b200,5,"
                                      "dgx-b200,4,8,32,"));
  CHECK(std::count(csv.out.begin(), csv.out.end(), '\n') == 7);
  CHECK(run_cli("sweep " + file.string() + " --csv --json").exit_code == 2);
  // Re-planned at each point: the best layout of each, never slower than the fixed one (which
  // the search includes).
  const fs::path planned = write_scenario("sweep-plan.yaml", slurp(file) + "  layout: plan\n");
  const Result best = run_cli("run " + planned.string() + " --json -q");
  REQUIRE(best.exit_code == 0);
  const auto best_points = nlohmann::json::parse(best.out)["variants"];
  REQUIRE(best_points.size() == points.size());
  for (std::size_t i = 0; i < points.size(); ++i) {
    CHECK(best_points[i]["step"]["step_time_s"].get<double>() <=
          points[i]["step"]["step_time_s"].get<double>() * (1 + 1e-12));
  }
  // Without a sweep: block there is nothing to sweep.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result none = run_cli("sweep " + source + "/scenarios/h100-vs-b200.yaml");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains("no sweep: block"));
}

TEST_CASE("run --attribute splits each compare entry's difference among its causes") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const Result table = run_cli("run " + source + "/scenarios/h100-vs-b200.yaml --attribute -q");
  REQUIRE(table.exit_code == 0);
  CHECK_THAT(table.out, Catch::Contains("why dgx-b200 differs from dgx-h100 (Shapley values"));
  const Result json = run_cli("run " + source + "/scenarios/h100-vs-b200.yaml --attribute --json");
  REQUIRE(json.exit_code == 0);
  const auto variants = nlohmann::json::parse(json.out)["variants"];
  const auto& attribution = variants[1]["attribution"];
  double sum = 0;
  for (const auto& part : attribution["parts"]) sum += part["step_time_s"].get<double>();
  const double difference = variants[1]["step"]["step_time_s"].get<double>() -
                            variants[0]["step"]["step_time_s"].get<double>();
  CHECK(sum == Approx(difference).epsilon(1e-12));
  CHECK(attribution["variant"]["step_time_s"] == variants[1]["step"]["step_time_s"]);
  // Nothing to attribute without a compare, and only run attributes.
  const fs::path single = write_scenario("single.yaml", kValid);
  const Result none = run_cli("run " + single.string() + " --attribute");
  CHECK(none.exit_code == 2);
  CHECK_THAT(none.err, Catch::Contains("nothing to attribute"));
  CHECK(run_cli("memory " + single.string() + " --attribute").exit_code == 2);
}

TEST_CASE(
    "run --sensitivity gives each variant a prediction interval, the same on any thread count") {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const std::string file = source + "/scenarios/h100-vs-b200.yaml";
  const Result one = run_cli("run " + file + " --sensitivity 12 --json --threads 1");
  const Result two = run_cli("run " + file + " --sensitivity 12 --json --threads 2");
  REQUIRE(one.exit_code == 0);
  CHECK(one.out == two.out);
  const auto variants = nlohmann::json::parse(one.out)["variants"];
  for (const auto& variant : variants) {
    const auto& step = variant["sensitivity"]["intervals"]["step_time_s"];
    CHECK(step["nominal"] == variant["step"]["step_time_s"]);
    CHECK(step["low"].get<double>() < step["high"].get<double>());
    CHECK(variant["sensitivity"]["inputs"].size() > 3);
  }
  const Result table = run_cli("run " + file + " --sensitivity 12 -q");
  CHECK_THAT(table.out, Catch::Contains("sensitivity of dgx-b200 (12 draws of"));
  CHECK(run_cli("run " + file + " --sensitivity 1").exit_code == 2);
  CHECK(run_cli("memory " + file + " --sensitivity 10").exit_code == 2);
}

TEST_CASE("a re-planned sweep point with a run keeps the layout whose run costs least") {
  const std::string scenario = slurp(fs::path(FLEETSIM_TEST_DATA_DIR) / "small-run.yaml");
  const Result plan =
      run_cli("plan " + write_scenario("point.yaml", scenario).string() + " --json -q");
  const Result sweep =
      run_cli("sweep " +
              write_scenario("points.yaml", scenario + "sweep:\n  grid: {cluster.nodes: [2]}\n  "
                                                       "layout: plan\n")
                  .string() +
              " --json -q");
  REQUIRE(plan.exit_code == 0);
  REQUIRE(sweep.exit_code == 0);
  // As `fleetsim plan` ranks the point's fastest layouts by their runs' expected cost.
  const auto ranked = nlohmann::json::parse(plan.out)["variants"];
  const auto point = nlohmann::json::parse(sweep.out)["variants"][0];
  REQUIRE(ranked.size() > 1);
  CHECK(point["layout"] == ranked[0]["layout"]);
  CHECK(point["run"]["cost_usd"]["mean"] == ranked[0]["run"]["cost_usd"]["mean"]);
  for (const auto& layout : ranked) {
    if (layout["run"].is_null()) continue;
    CHECK(point["run"]["cost_usd"]["mean"].get<double>() <=
          layout["run"]["cost_usd"]["mean"].get<double>());
  }
}

TEST_CASE(
    "every file of the bad-input catalogue gets exit 2 and one line naming its place, from "
    "run and validate alike") {
  const fs::path catalogue = fs::path(FLEETSIM_SOURCE_DIR) / "tests/bad_inputs";
  std::ifstream index(catalogue / "EXPECTED");
  REQUIRE(index);
  std::map<std::string, std::string> expected;
  for (std::string line; std::getline(index, line);) {
    if (line.empty() || line.front() == '#') continue;
    const auto tab = line.find('\t');
    REQUIRE(tab != std::string::npos);
    expected[line.substr(0, tab)] = line.substr(tab + 1);
  }
  // Every file is in the index, and the index names no file that is missing.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(catalogue)) {
    if (entry.path().extension() == ".yaml") files.insert(entry.path().filename().string());
  }
  std::set<std::string> indexed;
  for (const auto& [file, message] : expected) indexed.insert(file);
  CHECK(files == indexed);
  CHECK(files.size() >= 80);
  for (const auto& [file, message] : expected) {
    INFO(file);
    const std::string path = (catalogue / file).string();
    const Result result = run_cli("run " + path + " -q");
    CHECK(result.exit_code == 2);
    CHECK(result.out.empty());
    // One line: "error: FILE:LINE:COLUMN: ...", with what the index says.
    CHECK(std::count(result.err.begin(), result.err.end(), '\n') == 1);
    CHECK_THAT(result.err, Catch::Matches("error: " + path + ":[0-9]+:[0-9]+: .*\n"));
    CHECK_THAT(result.err, Catch::Contains(message));
    // validate refuses exactly what run does, in the same words.
    const Result validated = run_cli("validate " + path);
    CHECK(validated.exit_code == 2);
    CHECK(validated.err == result.err);
  }
  // None of them made a process grow past 1 GB (ru_maxrss: the largest child so far, in KB).
  rusage children{};
  getrusage(RUSAGE_CHILDREN, &children);
  CHECK(children.ru_maxrss < 1'000'000);
}
