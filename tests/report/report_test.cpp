// Tests of the console, JSON and HDF5 renderings of a hand-built two-variant report.

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "common/temp_dir.hpp"
#include "sim/engine/errors.hpp"
#include "sim/report/report.hpp"
#include "sim/report/result_fields.hpp"
#include "sim/report/summary_table.hpp"
#include "workloads/layout/dimensions.hpp"

namespace fleetsim {
namespace {

// Two 8-GPU nodes with 80 GB per GPU, pure data parallel over all 16 GPUs. Renderers only read
// names and the plan from the inputs.
StepInputs h100_inputs(int zero_stage) {
  StepInputs inputs;
  inputs.node.name = "dgx-h100";
  inputs.node.gpus = 8;
  inputs.nodes = 2;
  inputs.gpu.name = "h100-sxm";
  inputs.model.name = "llama3-8b";
  inputs.training.seq_len = 8192;
  inputs.training.global_batch = 256;
  inputs.plan.dp = 16;
  inputs.plan.zero_stage = zero_stage;
  return inputs;
}

// ZeRO-3: weights and gradients 16 GB each and optimizer states 96 GB sharded 16 ways are 1, 1
// and 6 GB; with 40 GB of activations the total is 48 GB of 80 GB, 40% headroom.
VariantReport fitting_variant() {
  VariantReport variant{"zero3", h100_inputs(3), {}};
  StepOutcome& outcome = variant.outcome;
  outcome.simulated = true;
  outcome.memory.items = {{"weights", 1e9, "bf16, sharded over 16 ranks"},
                          {"gradients", 1e9, "bf16, sharded over 16 ranks"},
                          {"optimizer states", 6e9, "fp32 master + 2 moments, sharded"},
                          {"activations", 40e9, "saved tensors of one micro-batch"}};
  outcome.memory.total_bytes = 48e9;
  outcome.memory.capacity_bytes = 80e9;
  // 256 sequences x 8192 tokens = 2,097,152 tokens in a 2 s step: 1,048,576 tokens/s, which is
  // 65,536 tokens/s on each of the 16 GPUs.
  outcome.step.step_time_s = 2.0;
  outcome.step.tokens_per_s = 1048576.0;
  outcome.step.mfu = 0.45;
  outcome.step.hfu = 0.5;
  outcome.step.model_flops = 1e16;
  outcome.step.hardware_flops = 1.1e16;
  outcome.step.breakdown = {1.5, 0.3, 0.2};
  outcome.step.comm_bytes_per_gpu = 48e9;
  outcome.step.events = 12345;
  outcome.step.links = {{"gpu0->nvswitch0", "nvlink", 450e9, 40e9, 0.0444},
                        {"node0.nic0->leaf0", "infiniband", 50e9, 8e9, 0.08}};
  outcome.warnings = {"bucket size is below 1 MB"};
  return variant;
}

// Plain DDP keeps every state whole: 16 + 16 + 96 GB plus 40 GB of activations is 168 GB,
// 88 GB more than the 80 GB of an H100.
VariantReport unfit_variant() {
  VariantReport variant{"ddp", h100_inputs(0), {}};
  StepOutcome& outcome = variant.outcome;
  outcome.simulated = false;
  outcome.memory.items = {{"weights", 16e9, "bf16, replicated"},
                          {"gradients", 16e9, "bf16, replicated"},
                          {"optimizer states", 96e9, "fp32 master + 2 moments, replicated"},
                          {"activations", 40e9, "saved tensors of one micro-batch"}};
  outcome.memory.total_bytes = 168e9;
  outcome.memory.capacity_bytes = 80e9;
  return variant;
}

RunReport two_variant_report() {
  RunReport report;
  report.scenario_name = "zero-stages";
  report.description = "ZeRO-3 against plain DDP on two H100 nodes";
  report.scenario_file = "scenarios/zero-stages.yaml";
  report.fleetsim_version = "0.1.0";
  report.seed = 42;
  report.variants = {fitting_variant(), unfit_variant()};
  return report;
}

using testing::TempDir;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

std::vector<std::string> csv_lines(const std::string& csv) {
  std::vector<std::string> lines;
  std::istringstream in(csv);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// The cell of `column` in CSV line `line` (RFC 4180 quotes undone).
std::string cell(const SummaryTable& table, const std::vector<std::string>& lines, std::size_t line,
                 const std::string& column) {
  std::size_t index = 0;
  while (index < table.columns.size() && table.columns[index].name != column) ++index;
  REQUIRE(index < table.columns.size());
  std::vector<std::string> cells(1);
  bool quoted = false;
  const std::string& text = lines.at(line);
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (quoted && text[i] == '"' && i + 1 < text.size() && text[i + 1] == '"') {
      cells.back() += '"';
      ++i;
    } else if (text[i] == '"') {
      quoted = !quoted;
    } else if (text[i] == ',' && !quoted) {
      cells.emplace_back();
    } else {
      cells.back() += text[i];
    }
  }
  REQUIRE(cells.size() == table.columns.size());
  return cells[index];
}

template <typename T>
T attribute(const std::map<std::string, Hdf5Attribute>& attributes, const std::string& name) {
  const auto found = attributes.find(name);
  REQUIRE(found != attributes.end());
  REQUIRE(std::holds_alternative<T>(found->second));
  return std::get<T>(found->second);
}

TEST_CASE("console table names every variant and marks the one that does not fit") {
  const std::string text = render_console(two_variant_report());
  CHECK(contains(text, "zero-stages"));
  CHECK(contains(text, "ZeRO-3 against plain DDP"));
  CHECK(contains(text, "zero3"));
  CHECK(contains(text, "ddp"));
  CHECK(contains(text, "1.00x"));
  CHECK(contains(text, "does not fit"));
  CHECK(contains(text, "dp16 zero3 recompute=none"));
  CHECK(contains(text, "16 (2 x 8)"));
  CHECK(contains(text, "1,048,576"));
  CHECK(contains(text, "65,536"));
  CHECK(contains(text, "2.000"));
  CHECK(contains(text, "45.0"));
  // 168 GB needed, 80 GB available: 88 GB over.
  CHECK(contains(text, "88.00 GB over"));
  CHECK(contains(text, "fp32 master + 2 moments, replicated"));
  CHECK(contains(text, "zero3: bucket size is below 1 MB"));
  CHECK(text.back() == '\n');
}

TEST_CASE("console speed-up is the throughput ratio over the first variant") {
  RunReport report = two_variant_report();
  report.variants[1] = fitting_variant();
  report.variants[1].name = "faster";
  report.variants[1].outcome.step.tokens_per_s *= 2.5;
  const std::string text = render_console(report);
  CHECK(contains(text, "1.00x"));
  CHECK(contains(text, "2.50x"));
  CHECK_FALSE(contains(text, "does not fit"));
}

TEST_CASE("scaling efficiency is the speed-up over the ratio of GPU counts") {
  // Four times the GPUs at 3.6 times the throughput: 90% scaling efficiency, in every output.
  RunReport report = two_variant_report();
  CHECK_FALSE(contains(render_console(report), "scaling efficiency"));  // same GPU counts
  report.variants[1] = fitting_variant();
  report.variants[1].name = "wider";
  report.variants[1].inputs.nodes = 8;
  report.variants[1].outcome.step.tokens_per_s *= 3.6;
  CHECK(scaling_efficiency_vs_first(report, 1) == Approx(0.9));
  const std::string text = render_console(report);
  const auto row = text.find("scaling efficiency vs zero3 (%, per GPU)");
  REQUIRE(row != std::string::npos);
  const std::string line = text.substr(row, text.find('\n', row) - row);
  CHECK(line.find("100.0") < line.find("90.0"));  // the first variant's cell, then the wider's
  CHECK(contains(text, "1:1 packed"));
  const auto json = nlohmann::json::parse(render_json(report));
  CHECK(json["variants"][1]["scaling_efficiency_vs_first"].get<double>() == Approx(0.9));
  report.variants[1] = unfit_variant();
  CHECK_FALSE(scaling_efficiency_vs_first(report, 1));
}

TEST_CASE("console marks headroom below the comfortable minimum") {
  RunReport report = two_variant_report();
  // 72 GB of 80 GB leaves 10% free, below kMinComfortableHeadroom (15%).
  report.variants[0].outcome.memory.total_bytes = 72e9;
  CHECK(contains(render_console(report), "10.0 low"));
}

TEST_CASE("console table rows line up") {
  const std::string text = render_console(two_variant_report());
  std::istringstream lines(text);
  std::string line;
  std::size_t node_row = 0;
  std::size_t speedup_row = 0;
  while (std::getline(lines, line)) {
    if (line.rfind("node preset", 0) == 0) {
      node_row = line.size();
    }
    if (line.rfind("speed-up", 0) == 0) {
      // "—" is three bytes but one column; count code points.
      speedup_row = line.size() - 2;
    }
  }
  CHECK(node_row > 0);
  CHECK(node_row == speedup_row);
}

TEST_CASE("JSON parses back with the numbers of the records") {
  const auto json = nlohmann::json::parse(render_json(two_variant_report()));
  CHECK(json["scenario"]["name"] == "zero-stages");
  CHECK(json["scenario"]["seed"] == 42);
  CHECK(json["scenario"]["fleetsim_version"] == "0.1.0");
  REQUIRE(json["variants"].size() == 2);

  const auto& fit = json["variants"][0];
  CHECK(fit["name"] == "zero3");
  CHECK(fit["gpus"] == 2 * 8);
  CHECK(fit["layout"]["dp"] == 16);
  CHECK(fit["layout"]["zero_stage"] == 3);
  CHECK(fit["layout"]["recompute"] == "none");
  CHECK(fit["simulated"] == true);
  CHECK(fit["step"]["step_time_s"].get<double>() == 2.0);
  CHECK(fit["step"]["tokens_per_s"].get<double>() == 1048576.0);
  CHECK(fit["step"]["mfu"].get<double>() == 0.45);
  CHECK(fit["step"]["exposed_comm_s"].get<double>() == 0.3);
  CHECK(fit["step"]["events"] == 12345);
  CHECK(fit["memory"]["items"].size() == 4);
  CHECK(fit["memory"]["headroom_fraction"].get<double>() == Approx(0.4));
  CHECK(fit["links"].size() == 2);
  CHECK(fit["links"][1]["kind"] == "infiniband");
  CHECK(fit["warnings"][0] == "bucket size is below 1 MB");
  CHECK(fit["speedup_vs_first"].get<double>() == 1.0);

  const auto& unfit = json["variants"][1];
  CHECK(unfit["simulated"] == false);
  CHECK(unfit["step"].is_null());
  CHECK(unfit["speedup_vs_first"].is_null());
  CHECK(unfit["memory"]["fits"] == false);
  CHECK(unfit["memory"]["total_bytes"].get<double>() == 168e9);
  CHECK(unfit["links"].empty());
}

TEST_CASE("a sweep's HDF5 file has its table and its swept values") {
  RunReport report = two_variant_report();
  report.swept = true;
  report.variants[0].swept = {{"cluster.nodes", "1"}};
  report.variants[1].swept = {{"cluster.nodes", "2"}};
  // The point that fits is its own smallest; the other has no efficiency.
  CHECK(scaling_efficiency_in_sweep(report, 0) == 1.0);
  CHECK_FALSE(scaling_efficiency_in_sweep(report, 1));
  const TempDir dir;
  const auto path = dir.path() / "sweep.h5";
  write_hdf5(report, path);
  const Hdf5Summary summary = read_hdf5_summary(path);
  CHECK(summary.swept == std::vector<std::string>{"sweep.cluster.nodes"});
  CHECK(summary.summary_rows == 2);
  REQUIRE(summary.summary_columns.size() > 3);
  CHECK(summary.summary_columns[2] == "sweep.cluster.nodes");
  CHECK(std::count(summary.summary_columns.begin(), summary.summary_columns.end(),
                   "scaling_efficiency") == 1);
  REQUIRE(summary.variants.size() == 2);
  // Not a sweep: neither swept columns nor an efficiency in the sweep.
  write_hdf5(two_variant_report(), path);
  const Hdf5Summary plain = read_hdf5_summary(path);
  CHECK(plain.swept.empty());
  CHECK(plain.summary_rows == 2);
  CHECK(std::count(plain.summary_columns.begin(), plain.summary_columns.end(),
                   "scaling_efficiency") == 0);
  // The CSV: the swept path after the name and group, numbers as the scenario wrote them, the
  // point that does not fit without a step.
  const SummaryTable table = summary_table(report);
  const std::vector<std::string> lines = csv_lines(render_summary_csv(table));
  REQUIRE(lines.size() == 3);
  CHECK_THAT(lines[0], Catch::StartsWith("name,group,sweep.cluster.nodes,"));
  CHECK(cell(table, lines, 1, "sweep.cluster.nodes") == "1");
  CHECK(cell(table, lines, 2, "sweep.cluster.nodes") == "2");
  CHECK(cell(table, lines, 1, "scaling_efficiency") == "1");
  CHECK(cell(table, lines, 2, "scaling_efficiency").empty());
  CHECK(cell(table, lines, 2, "step_time_s").empty());
  CHECK(cell(table, lines, 2, "simulated") == "false");
}

TEST_CASE("the summary table has a column for every scalar a variant's results carry") {
  const RunReport report = two_variant_report();
  const SummaryTable table = summary_table(report);
  const auto has_column = [&](const std::string& name) {
    return std::any_of(table.columns.begin(), table.columns.end(),
                       [&](const SummaryColumn& column) { return column.name == name; });
  };
  // Each registered field of the groups the variants have, by its HDF5 name where it has one;
  // no run's, as neither variant has a run.
  int fields = 0;
  for (const ResultField& field : result_fields()) {
    const bool variant_level = field.group == FieldGroup::variant ||
                               field.group == FieldGroup::step || field.group == FieldGroup::memory;
    if (!variant_level) continue;
    const std::string name(field.hdf5.empty() ? field.name : field.hdf5);
    INFO(name);
    CHECK(has_column(name));
    ++fields;
  }
  CHECK(fields > 30);
  for (const LayoutDimension& dimension : layout_dimensions()) {
    CHECK(has_column(std::string(dimension.output)));
  }
  CHECK_FALSE(
      std::any_of(table.columns.begin(), table.columns.end(),
                  [](const SummaryColumn& column) { return column.name.starts_with("run_"); }));
  // The cells are the variants' values: the CSV's, and the same rows and columns in HDF5.
  const std::vector<std::string> lines = csv_lines(render_summary_csv(table));
  REQUIRE(lines.size() == 3);
  CHECK(cell(table, lines, 1, "name") == "zero3");
  CHECK(cell(table, lines, 1, "step_time_s") == "2");
  CHECK(cell(table, lines, 1, "tokens_per_s") == "1048576");
  CHECK(cell(table, lines, 1, "tokens_per_s_per_gpu") == "65536");
  CHECK(cell(table, lines, 1, "mfu") == "0.45");
  CHECK(cell(table, lines, 1, "memory_total_bytes") == "4.8e+10");  // the shortest form
  CHECK(cell(table, lines, 1, "zero_stage") == "3");
  CHECK(cell(table, lines, 2, "simulated") == "false");
  CHECK(cell(table, lines, 2, "step_time_s").empty());
  CHECK(cell(table, lines, 2, "largest_share").empty());
  CHECK(std::stod(cell(table, lines, 2, "memory_total_bytes")) == 168e9);
  const auto unit_of = [&](const std::string& name) {
    for (const SummaryColumn& column : table.columns) {
      if (column.name == name) return column.unit;
    }
    return std::string("?");
  };
  CHECK(unit_of("step_time_s") == "s");
  CHECK(unit_of("memory_total_bytes") == "bytes");
  CHECK(unit_of("bucket_bytes") == "bytes");
  const TempDir dir;
  write_hdf5(report, dir.path() / "two.h5");
  const Hdf5Summary file = read_hdf5_summary(dir.path() / "two.h5");
  CHECK(file.summary_rows == 2);
  // The GPU profile's entries it read: the capacity and at least the kernel model's eight.
  REQUIRE(file.variants.size() == 2);
  CHECK(file.variants[0].dataset_rows.at("profile") >= 9);
  std::vector<std::string> names;
  for (const SummaryColumn& column : table.columns) names.push_back(column.name);
  CHECK(file.summary_columns == names);
}

TEST_CASE("variant groups have plain names, told apart by their index") {
  RunReport report = two_variant_report();
  report.variants.push_back(fitting_variant());
  report.variants.push_back(fitting_variant());
  report.variants[0].name = "8 hot spares, degraded / evicted";
  report.variants[1].name = "cluster.node=dgx-h100";
  report.variants[2].name = "zero3";
  report.variants[3].name = "zero3";
  CHECK(variant_group_names(report) == std::vector<std::string>{"8_hot_spares_degraded_evicted",
                                                                "cluster.node_dgx-h100", "zero3",
                                                                "zero3_3"});
  report.variants[0].name = "!!";
  report.variants[1].name = ".";
  CHECK(variant_group_names(report)[0] == "0");
  CHECK(variant_group_names(report)[1] == "._1");
  // A name with its index appended may be another's already: a count follows until it is not.
  report.variants[0].name = "b_2";
  report.variants[1].name = "b";
  report.variants[2].name = "b";
  report.variants[3].name = "1";
  CHECK(variant_group_names(report) == std::vector<std::string>{"b_2", "b", "b_2_2", "1"});
  report.variants[0].name = "1";
  report.variants[1].name = "!!";
  const std::vector<std::string> names = variant_group_names(report);
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
}

TEST_CASE("a sweep's columns: the model swept beside its field, text among numbers as text") {
  RunReport report = two_variant_report();
  report.swept = true;
  report.variants[1] = fitting_variant();
  report.variants[1].name = "other";
  // `model` is a path a sweep may vary and a registered field: both are columns.
  report.variants[0].swept = {{"model", "llama3-8b"}, {"layout.dp", "auto"}};
  report.variants[1].swept = {{"model", "llama3-70b"}, {"layout.dp", "8"}};
  const SummaryTable table = summary_table(report);
  CHECK(table.swept == std::vector<std::string>{"sweep.model", "sweep.layout.dp"});
  const auto kind_of = [&](const std::string& name) {
    for (const SummaryColumn& column : table.columns) {
      if (column.name == name) return column.kind;
    }
    FAIL("no column " << name);
    return SummaryColumn::Kind::number;
  };
  CHECK(kind_of("model") == SummaryColumn::Kind::text);
  CHECK(kind_of("sweep.model") == SummaryColumn::Kind::text);
  CHECK(kind_of("sweep.layout.dp") == SummaryColumn::Kind::text);  // "auto" is not a number
  const std::vector<std::string> lines = csv_lines(render_summary_csv(table));
  CHECK(cell(table, lines, 2, "sweep.layout.dp") == "8");
  // A value that reads as a number only in part, or in hex, stays text.
  report.variants[1].swept[1].second = "0x10";
  CHECK(summary_table(report).rows[1][3] == SummaryCell{std::string("0x10")});
}

TEST_CASE("CSV quotes what needs quoting, and an empty report is a header alone") {
  CHECK(csv_field("plain") == "plain");
  CHECK(csv_field("a,b") == "\"a,b\"");
  CHECK(csv_field("say \"hi\"") == "\"say \"\"hi\"\"\"");
  CHECK(csv_field("two\nlines\r") == "\"two\nlines\r\"");
  CHECK(csv_number(std::nan("")).empty());
  CHECK(csv_number(0.1) == "0.1");
  CHECK(std::stod(csv_number(1.0 / 3)) == 1.0 / 3);  // reads back exactly
  RunReport empty = two_variant_report();
  empty.variants.clear();
  const SummaryTable table = summary_table(empty);
  CHECK(table.rows.empty());
  const std::string csv = render_summary_csv(table);
  CHECK(std::count(csv.begin(), csv.end(), '\n') == 1);
  CHECK_THAT(csv, Catch::StartsWith("name,group,"));
}

TEST_CASE("JSON keeps keys in a fixed order") {
  const std::string text = render_json(two_variant_report());
  CHECK(text.find("\"scenario\"") < text.find("\"variants\""));
  CHECK(text.find("\"step_time_s\"") < text.find("\"tokens_per_s\""));
  CHECK(text == render_json(two_variant_report()));
}

TEST_CASE("HDF5 file reads back with the attributes and rows written") {
  const TempDir dir;
  const auto path = dir.path() / "result.h5";
  write_hdf5(two_variant_report(), path);
  CHECK(dir.file_count() == 1);

  const Hdf5Summary summary = read_hdf5_summary(path);
  CHECK(attribute<std::string>(summary.attributes, "scenario_name") == "zero-stages");
  CHECK(attribute<std::string>(summary.attributes, "scenario_file") ==
        "scenarios/zero-stages.yaml");
  CHECK(attribute<std::uint64_t>(summary.attributes, "seed") == 42);
  REQUIRE(summary.variants.size() == 2);

  const Hdf5VariantSummary& fit = summary.variants[0];
  CHECK(fit.group == "/variants/zero3");
  CHECK(attribute<std::string>(fit.attributes, "gpu_profile") == "h100-sxm");
  CHECK(attribute<std::int64_t>(fit.attributes, "dp") == 16);
  CHECK(attribute<std::int64_t>(fit.attributes, "gpus") == 16);
  CHECK(attribute<std::int64_t>(fit.attributes, "simulated") == 1);
  CHECK(attribute<double>(fit.attributes, "step_time_s") == 2.0);
  CHECK(attribute<double>(fit.attributes, "tokens_per_s") == 1048576.0);
  CHECK(attribute<double>(fit.attributes, "speedup_vs_first") == 1.0);
  // Both variants have 16 GPUs: no scaling to report.
  CHECK(std::isnan(attribute<double>(fit.attributes, "scaling_efficiency_vs_first")));
  CHECK(fit.dataset_rows.at("breakdown") == 9);  // compute, exposed, idle; 6 kinds exposed
  CHECK(fit.dataset_rows.at("memory") == 4);
  CHECK(fit.dataset_rows.at("links") == 2);
  CHECK(fit.dataset_rows.at("warnings") == 1);
  CHECK(fit.warnings == std::vector<std::string>{"bucket size is below 1 MB"});

  const Hdf5VariantSummary& unfit = summary.variants[1];
  CHECK(unfit.group == "/variants/ddp");
  CHECK(attribute<std::int64_t>(unfit.attributes, "simulated") == 0);
  CHECK(std::isnan(attribute<double>(unfit.attributes, "step_time_s")));
  CHECK(std::isnan(attribute<double>(unfit.attributes, "speedup_vs_first")));
  CHECK(std::isnan(attribute<double>(unfit.attributes, "scaling_efficiency_vs_first")));
  CHECK(attribute<double>(unfit.attributes, "memory_total_bytes") == 168e9);
  CHECK(unfit.dataset_rows.at("breakdown") == 9);
  CHECK(unfit.dataset_rows.at("links") == 0);
  CHECK(unfit.dataset_rows.at("warnings") == 0);
}

TEST_CASE("HDF5 group names cannot contain a slash, so the variant name is kept as an attribute") {
  RunReport report = two_variant_report();
  report.variants[0].name = "h100/zero3";
  const TempDir dir;
  const auto path = dir.path() / "result.h5";
  write_hdf5(report, path);
  const Hdf5Summary summary = read_hdf5_summary(path);
  REQUIRE(summary.variants.size() == 2);
  CHECK(summary.variants[0].group == "/variants/h100_zero3");
  CHECK(attribute<std::string>(summary.variants[0].attributes, "name") == "h100/zero3");
}

TEST_CASE("HDF5 written into a missing directory throws and leaves nothing behind") {
  const TempDir dir;
  const auto path = dir.path() / "missing" / "result.h5";
  CHECK_THROWS_AS(write_hdf5(two_variant_report(), path), ModelError);
  CHECK_THROWS_WITH(write_hdf5(two_variant_report(), path),
                    Catch::StartsWith("cannot write HDF5 file " + path.string()));
  CHECK(dir.file_count() == 0);
}

TEST_CASE("HDF5 written over an existing file replaces it whole") {
  const TempDir dir;
  const auto path = dir.path() / "result.h5";
  write_text_atomically(path, "not an HDF5 file");
  write_hdf5(two_variant_report(), path);
  CHECK(read_hdf5_summary(path).variants.size() == 2);

  RunReport smaller = two_variant_report();
  smaller.variants.pop_back();
  write_hdf5(smaller, path);
  CHECK(read_hdf5_summary(path).variants.size() == 1);
  CHECK(dir.file_count() == 1);
}

TEST_CASE("reading a file that is not HDF5 throws ModelError") {
  const TempDir dir;
  const auto path = dir.path() / "result.h5";
  write_text_atomically(path, "not an HDF5 file");
  CHECK_THROWS_AS(read_hdf5_summary(path), ModelError);
}

TEST_CASE("text is written atomically and replaces an existing file") {
  const TempDir dir;
  const auto path = dir.path() / "result.json";
  write_text_atomically(path, "a much longer first version\n");
  write_text_atomically(path, "second\n");
  CHECK(read_text(path) == "second\n");
  CHECK(dir.file_count() == 1);
}

TEST_CASE("text written into a missing directory throws and leaves nothing behind") {
  const TempDir dir;
  const auto path = dir.path() / "missing" / "result.json";
  CHECK_THROWS_AS(write_text_atomically(path, "{}\n"), ModelError);
  CHECK_FALSE(std::filesystem::exists(dir.path() / "missing"));
  CHECK(dir.file_count() == 0);
}

TEST_CASE("a temporary file of a process that has ended is removed by the next write") {
  const TempDir dir;
  const auto path = dir.path() / "result.json";
  // A process that has ended: a child, waited for. And one that runs: this one's parent.
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  REQUIRE(child > 0);
  ::waitpid(child, nullptr, 0);
  char host[256] = {};
  REQUIRE(::gethostname(host, sizeof host - 1) == 0);
  const std::string here = std::string(".tmp.") + host + ".";
  const auto dead = dir.path() / ("result.json" + here + std::to_string(child));
  const auto running = dir.path() / ("result.json" + here + std::to_string(::getppid()));
  const auto other = dir.path() / ("other.json" + here + std::to_string(child));
  // Another machine's writer sharing the directory: its process is not this machine's to see.
  const auto elsewhere = dir.path() / ("result.json.tmp.another-host." + std::to_string(child));
  for (const auto& file : {dead, running, other, elsewhere}) std::ofstream(file) << "half";
  write_text_atomically(path, "whole\n");
  CHECK(read_text(path) == "whole\n");
  CHECK_FALSE(std::filesystem::exists(dead));
  CHECK(std::filesystem::exists(running));  // its writer may still finish
  CHECK(std::filesystem::exists(other));    // another target's
  CHECK(std::filesystem::exists(elsewhere));
  CHECK(temp_file_being_written() == nullptr);
}

TEST_CASE("a result's target is checked before anything is simulated") {
  const TempDir dir;
  const auto input = dir.path() / "scenario.yaml";
  std::ofstream(input) << "name: x\n";
  CHECK(output_target_problem(dir.path() / "new.h5", {input}).empty());
  CHECK_THAT(output_target_problem(dir.path() / "missing" / "x.h5", {input}),
             Catch::Contains("does not exist"));
  CHECK_THAT(output_target_problem(dir.path(), {input}), Catch::Contains("is a directory"));
  CHECK_THAT(output_target_problem("/dev/null", {input}), Catch::Contains("not a regular file"));
  CHECK_THAT(output_target_problem(input, {input}), Catch::Contains("is the input"));
  // The same file by another path is the input too.
  CHECK_THAT(output_target_problem(dir.path() / "." / "scenario.yaml", {input}),
             Catch::Contains("is the input"));
  // A directory that takes no file (procfs), refused up front whoever runs it: root passes
  // access() there, where the file tried fails; the check leaves nothing where it succeeds.
  const std::string in_proc = output_target_problem("/proc/version.h5", {input});
  CHECK((in_proc.find("takes no new file") != std::string::npos ||
         in_proc.find("is not writable") != std::string::npos));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) {
    ++files;
  }
  CHECK(files == 1);  // the input alone
}

TEST_CASE("a plan's HDF5 file carries its search counts beside its ranked layouts") {
  const TempDir dir;
  const auto path = dir.path() / "plan.h5";
  RunReport report = two_variant_report();
  report.plan = PlanSummary{800, 420, 171, 30, 179, 0, 11.5, 0.15, std::nullopt};
  write_hdf5(report, path);
  const Hdf5Summary summary = read_hdf5_summary(path);
  CHECK(attribute<std::uint64_t>(summary.attributes, "plan_layouts") == 800);
  CHECK(attribute<std::uint64_t>(summary.attributes, "plan_refused") == 420);
  CHECK(attribute<std::uint64_t>(summary.attributes, "plan_not_fitting") == 171);
  CHECK(attribute<std::uint64_t>(summary.attributes, "plan_replayed") == 30);
  CHECK(attribute<std::uint64_t>(summary.attributes, "plan_bounded_out") == 179);
  CHECK(attribute<double>(summary.attributes, "plan_search_s") == 11.5);
  CHECK(attribute<double>(summary.attributes, "plan_min_headroom") == 0.15);
  CHECK(summary.variants.size() == 2);
  // A run's file has none of them.
  write_hdf5(two_variant_report(), path);
  CHECK(read_hdf5_summary(path).attributes.count("plan_layouts") == 0);
}

TEST_CASE("an attribution prints its parts adding up to the total, and writes them to HDF5") {
  RunReport report = two_variant_report();
  Attribution a;
  a.baseline = "zero3";
  a.variant = "zero1";
  a.factors = {Factor::compute, Factor::network};
  a.metrics = {"step_time_s"};
  a.baseline_values = {2.0};
  a.variant_values = {1.5};
  a.parts = {{-0.75}, {0.25}};
  a.counterfactuals = 4;
  report.variants[1].attribution = a;
  const std::string text = render_console(report);
  CHECK_THAT(text, Catch::Contains("why zero1 differs from zero3 (Shapley values over 2 factors, "
                                   "4 simulations)"));
  CHECK_THAT(text, Catch::Contains("\n  compute         -0.750\n"));
  CHECK_THAT(text, Catch::Contains("\n  network         +0.250\n"));
  CHECK_THAT(text, Catch::Contains("\n  total           -0.500\n"));
  const auto json = nlohmann::json::parse(render_json(report));
  const auto& parts = json["variants"][1]["attribution"]["parts"];
  REQUIRE(parts.size() == 2);
  CHECK(parts[0]["factor"] == "compute");
  CHECK(parts[1]["step_time_s"] == 0.25);
  CHECK(json["variants"][1]["attribution"]["against"] == "zero3");
  CHECK(json["variants"][0].count("attribution") == 0);
  const TempDir dir;
  const auto path = dir.path() / "attribution.h5";
  write_hdf5(report, path);
  const Hdf5Summary summary = read_hdf5_summary(path);
  REQUIRE(summary.variants.size() == 2);
  CHECK(summary.variants[0].group_attributes.count("attribution") == 0);
  CHECK(summary.variants[1].dataset_rows.at("attribution/parts") == 2);
  const auto& attributes = summary.variants[1].group_attributes.at("attribution");
  CHECK(std::get<std::string>(attributes.at("against")) == "zero3");
  CHECK(std::get<double>(attributes.at("variant_step_time_s")) == 1.5);
  CHECK(std::isnan(std::get<double>(attributes.at("baseline_wall_s_mean"))));
  // One that could not be made says why, and has no parts.
  Attribution refused;
  refused.baseline = "zero3";
  refused.variant = "ddp";
  refused.not_attributed = "ddp does not fit in memory";
  report.variants[1].attribution = refused;
  CHECK_THAT(
      render_console(report),
      Catch::Contains("why ddp differs from zero3: not attributed, ddp does not fit in memory"));
  write_hdf5(report, path);
  CHECK(read_hdf5_summary(path).variants[1].dataset_rows.at("attribution/parts") == 0);
}

TEST_CASE("a sensitivity prints its interval and swings, and writes every draw to HDF5") {
  RunReport report = two_variant_report();
  Sensitivity s;
  s.draws = 3;
  s.coverage = 0.9;
  s.metrics = {"step_time_s", "tokens_per_s", "mfu"};
  s.intervals = {{"step_time_s", 2.0, 1.9, 2.05, 2.3},
                 {"tokens_per_s", 1048576, 911805, 1022611, 1103764},
                 {"mfu", 0.45, 0.39, 0.44, 0.47}};
  InputSwing swing;
  swing.input.name = "gemm_sustained";
  swing.input.value = 8e14;
  swing.input.sigma = 2e13;
  swing.minus = {2.1, 998643, 0.43};
  swing.plus = {1.95, 1075462, 0.46};
  s.swings.push_back(swing);
  s.samples = {{1.9, 1103764, 0.47}, {2.05, 1022611, 0.44}, {2.3, 911805, 0.39}};
  report.variants[0].sensitivity = s;
  const std::string text = render_console(report);
  CHECK_THAT(text, Catch::Contains("sensitivity of zero3 (3 draws of 1 uncertain inputs"));
  CHECK_THAT(text, Catch::Contains("P5"));
  CHECK_THAT(text, Catch::Contains("P95"));
  CHECK_THAT(text, Catch::Contains("gemm_sustained"));
  const auto json = nlohmann::json::parse(render_json(report));
  CHECK(json["variants"][0]["sensitivity"]["intervals"]["step_time_s"]["high"] == 2.3);
  CHECK(json["variants"][0]["sensitivity"]["inputs"][0]["plus_sigma"]["step_time_s"] == 1.95);
  const TempDir dir;
  const auto path = dir.path() / "sensitivity.h5";
  write_hdf5(report, path);
  const Hdf5VariantSummary written = read_hdf5_summary(path).variants[0];
  CHECK(written.dataset_rows.at("sensitivity/samples") == 3);
  CHECK(written.dataset_rows.at("sensitivity/intervals") == 3);
  CHECK(written.dataset_rows.at("sensitivity/inputs") == 1);
  CHECK(std::get<std::int64_t>(written.group_attributes.at("sensitivity").at("draws")) == 3);
}

}  // namespace

TEST_CASE("a partial report measures no speed-up against a stand-in for a baseline left out") {
  // Two fitting variants on 16 and 32 GPUs, the second at 1.5 times the throughput.
  RunReport report;
  report.variants = {fitting_variant(), fitting_variant()};
  report.variants[1].name = "twice the nodes";
  report.variants[1].inputs.nodes *= 2;
  report.variants[1].outcome.step.tokens_per_s *= 1.5;
  REQUIRE(speedup_vs_first(report, 1) == Approx(1.5));
  REQUIRE(scaling_efficiency_vs_first(report, 1) == Approx(0.75));

  // A stop that left a third variant out changes nothing; one that left the first out, and put
  // another first, leaves the speed-ups empty.
  report.partial = PartialResults{};
  report.partial->not_finished = {fitting_variant()};
  CHECK(speedup_vs_first(report, 1) == Approx(1.5));
  report.partial->first_variant_left_out = true;
  CHECK_FALSE(speedup_vs_first(report, 1));
  CHECK_FALSE(scaling_efficiency_vs_first(report, 1));
  CHECK(nlohmann::json::parse(render_json(report))["variants"][1]["speedup_vs_first"].is_null());

  // A sweep over node counts: the 32-GPU point scales from the 16-GPU one, but not from itself
  // when a stop left the 16-GPU point out.
  RunReport sweep = report;
  sweep.partial.reset();
  sweep.swept = true;
  sweep.variants[0].swept = {{"cluster.nodes", "2"}};
  sweep.variants[1].swept = {{"cluster.nodes", "4"}};
  CHECK(scaling_efficiency_in_sweep(sweep, 1) == Approx(0.75));
  VariantReport smaller = sweep.variants[0];
  sweep.variants.erase(sweep.variants.begin());
  sweep.partial = PartialResults{};
  sweep.partial->not_finished = {smaller};
  CHECK_FALSE(scaling_efficiency_in_sweep(sweep, 0));
  // A larger point left out is no baseline: the 16-GPU point is its own.
  sweep.variants = {smaller};
  sweep.partial->not_finished = {report.variants[1]};
  sweep.partial->not_finished[0].swept = {{"cluster.nodes", "4"}};
  CHECK(scaling_efficiency_in_sweep(sweep, 0) == Approx(1.0));
}

TEST_CASE("a partial sweep whose smaller point was left out shows no scaling efficiency") {
  // The 32-GPU point finished, the 16-GPU point of its group did not: every output leaves its
  // efficiency empty (an empty optional read would be undefined behaviour).
  RunReport sweep;
  sweep.swept = true;
  sweep.variants = {fitting_variant()};
  sweep.variants[0].inputs.nodes = 4;
  sweep.variants[0].swept = {{"cluster.nodes", "4"}};
  VariantReport smaller = fitting_variant();
  smaller.swept = {{"cluster.nodes", "2"}};
  sweep.partial = PartialResults{};
  sweep.partial->not_finished = {smaller};
  REQUIRE_FALSE(scaling_efficiency_in_sweep(sweep, 0));

  const std::string table = render_sweep(sweep);
  CHECK(contains(table, "partial: "));
  CHECK(contains(table, "1 of 2 points finished"));
  const SummaryTable summary = summary_table(sweep);
  const std::vector<std::string> lines = csv_lines(render_summary_csv(summary));
  CHECK(cell(summary, lines, 1, "tokens_per_s_per_gpu") == "32768");  // 1,048,576 on 32 GPUs
  CHECK(cell(summary, lines, 1, "scaling_efficiency").empty());
  const TempDir dir;
  const auto path = dir.path() / "sweep.h5";
  write_hdf5(sweep, path);
  const Hdf5Summary file = read_hdf5_summary(path);
  CHECK(file.summary_rows == 1);
  CHECK(std::get<std::int64_t>(file.attributes.at("partial")) == 1);
  CHECK(std::get<std::string>(file.attributes.at("not_finished")) == "zero3");
}

TEST_CASE("a trace is valid JSON whatever its names hold, and keeps its text exact") {
  RunReport report = two_variant_report();
  report.variants[0].name = "quote \" backslash \\ tab \t newline \n byte \xff end";
  TraceSlice slice;
  slice.name = "mb0.L0.qkv \"x\"";
  slice.begin = SimTime::from_ns(1'234'567);
  slice.end = SimTime::from_ns(1'334'568);
  slice.flops = 2e12;
  slice.bytes = 1e9;
  report.variants[0].outcome.step.trace = {slice};
  const nlohmann::json trace = nlohmann::json::parse(render_trace(report));
  const auto& events = trace["traceEvents"];
  CHECK(events[0]["args"]["name"].get<std::string>().starts_with("quote \" backslash \\ tab"));
  const auto& kernel = events[2];
  CHECK(kernel["name"] == "mb0.L0.qkv \"x\"");
  CHECK(kernel["ts"].get<double>() == 1234.567);
  CHECK(kernel["dur"].get<double>() == 100.001);
  CHECK(kernel["args"]["flops"] == 2000000000000);
  // 2e12 FLOPs in 100.001 us: 19,999.8 TFLOP/s to four digits.
  CHECK(kernel["args"]["tflop_per_s"].get<double>() == 20000.0);
  CHECK(trace["otherData"]["scenario"] == "zero-stages");
}

}  // namespace fleetsim
