// The result registry and the outputs rendered from it agree: every registered field is where
// its JSON key and HDF5 attribute say, for a variant with every group present.
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <stdexcept>
#include <string>

#include "common/temp_dir.hpp"
#include "scenario/fixture.hpp"
#include "sim/job/job_of_step.hpp"
#include "sim/report/report.hpp"
#include "sim/report/result_fields.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

using testing::TempDir;

// A spot variant of the 70B pre-training run: a simulated step, a priced run on spot capacity.
RunReport report_with_every_group() {
  const Scenario scenario = load_scenario(
      std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios/llama3-70b-pretraining-run.yaml",
      testing::source_data());
  const Variant& spot = scenario.variants[4];
  REQUIRE(spot.run);
  REQUIRE(spot.run->spot);
  REQUIRE(spot.run->priced);
  VariantReport variant{spot.name, spot.inputs, simulate_step(spot.inputs), spot.run};
  REQUIRE(variant.outcome.simulated);
  StepCache steps;
  variant.job = job_of_step(*spot.run, spot.inputs, variant.outcome.step.step_time_s, {},
                            variant.outcome.warnings, steps);
  variant.job_result = simulate_job(*variant.job, 5, scenario.seed);
  RunReport report;
  report.scenario_name = scenario.name;
  report.variants = {variant};
  report.plan = PlanSummary{10, 1, 2, 3, 4, 0, 0.5, 0.0, std::nullopt};
  return report;
}

const nlohmann::json& object_of(const nlohmann::json& root, FieldGroup group) {
  const nlohmann::json& variant = root["variants"][0];
  switch (group) {
    case FieldGroup::scenario: return root["scenario"];
    case FieldGroup::plan: return root["plan"];
    case FieldGroup::variant: return variant;
    case FieldGroup::step: return variant["step"];
    case FieldGroup::memory: return variant["memory"];
    case FieldGroup::run: return variant["run"];
    case FieldGroup::spot: return variant["run"]["spot"];
  }
  return root;
}

}  // namespace

TEST_CASE("every registered field is in the JSON under its group, and nothing else is there") {
  const RunReport report = report_with_every_group();
  const nlohmann::json json = nlohmann::json::parse(render_json(report));
  std::set<std::pair<FieldGroup, std::string>> names;
  for (const ResultField& field : result_fields()) {
    if (field.name.empty()) continue;
    INFO(field.name);
    CHECK(names.insert({field.group, std::string(field.name)}).second);  // one key once
    CHECK(object_of(json, field.group).contains(std::string(field.name)));
  }
  // Each group's scalars are registered: the JSON has no scalar key the registry lacks.
  for (const ResultGroup& group : result_groups()) {
    for (const auto& [key, value] : object_of(json, group.group).items()) {
      if (value.is_object() || value.is_array()) continue;  // tables and groups
      INFO(key);
      CHECK(names.count({group.group, key}) == 1);
    }
  }
}

TEST_CASE("every registered HDF5 attribute is written where its group says") {
  const RunReport report = report_with_every_group();
  const TempDir dir;
  const auto path = dir.path() / "results.h5";
  write_hdf5(report, path);
  const Hdf5Summary file = read_hdf5_summary(path);
  REQUIRE(file.variants.size() == 1);
  const Hdf5VariantSummary& variant = file.variants.front();
  const auto& run = variant.group_attributes.at("run");
  for (const ResultField& field : result_fields()) {
    if (field.hdf5.empty()) continue;
    INFO(field.hdf5);
    const std::string name(field.hdf5);
    const bool summary = std::holds_alternative<SampleSummary>(field.get(report, 0));
    const std::string written = summary ? name + "_p90" : name;
    switch (field.group) {
      case FieldGroup::scenario:
      case FieldGroup::plan: CHECK(file.attributes.count(written) == 1); break;
      case FieldGroup::variant:
      case FieldGroup::step:
      case FieldGroup::memory: CHECK(variant.attributes.count(written) == 1); break;
      case FieldGroup::run:
      case FieldGroup::spot: CHECK(run.count(written) == 1); break;
    }
  }
  CHECK(variant.dataset_rows.at("run/wall_s") == 5);
}

TEST_CASE("the schema page lists every field and table with its unit") {
  const std::string page = render_results_schema();
  for (const ResultField& field : result_fields()) {
    const std::string_view shown = field.name.empty() ? field.hdf5 : field.name;
    CHECK_THAT(page, Catch::Contains("`" + std::string(shown) + "`"));
  }
  for (const ResultTable& table : result_tables()) {
    CHECK_THAT(page, Catch::Contains(std::string(table.columns)));
  }
  CHECK_THAT(page, Catch::Contains("| `step_time_s` | `step_time_s` | s |"));
}

TEST_CASE("a field is found by its group and name, and a name not registered is refused") {
  const RunReport report = report_with_every_group();
  const StepResult& step = report.variants[0].outcome.step;
  const FieldValue per_gpu = result_field(FieldGroup::step, "tokens_per_s_per_gpu").get(report, 0);
  CHECK(std::get<double>(per_gpu) == Approx(step.tokens_per_s / report.variants[0].inputs.nodes /
                                            report.variants[0].inputs.node.gpus));
  CHECK(std::get<std::string>(result_field(FieldGroup::step, "largest_share").get(report, 0)) ==
        largest_share(step.breakdown));
  CHECK_THROWS_AS(result_field(FieldGroup::run, "tokens_per_s"), std::logic_error);
}

TEST_CASE("every kind of exposed communication is a registered result and a breakdown row") {
  const RunReport report = report_with_every_group();
  const StepBreakdown& parts = report.variants[0].outcome.step.breakdown;
  std::string_view rows;  // the HDF5 breakdown table's description
  for (const ResultTable& table : result_tables()) {
    if (table.hdf5 == "breakdown") rows = table.description;
  }
  for (const ExposedPart& part : kExposedParts) {
    CAPTURE(part.key);
    const std::string name = std::string("exposed_") + part.key;
    CHECK(std::get<double>(result_field(FieldGroup::step, name + "_s").get(report, 0)) ==
          parts.*part.seconds);
    CHECK(rows.find(name) != std::string_view::npos);
  }
}

TEST_CASE("the largest share of a step names one kind of exposed communication, not a sum") {
  // Tensor- and expert-parallel time are apart: neither outweighs compute, though together they
  // would; where one does, it is named.
  StepBreakdown parts;
  parts.compute_s = 1.0;
  parts.exposed_tp_s = 0.6;
  parts.exposed_ep_s = 0.6;
  CHECK(largest_share(parts) == "compute");
  parts.compute_s = 0.1;
  parts.exposed_tp_s = 0.2;
  parts.exposed_ep_s = 0.5;
  CHECK(largest_share(parts) == "exposed EP comm");
  parts.exposed_cp_s = 0.7;
  CHECK(largest_share(parts) == "exposed CP comm");
}

TEST_CASE("a measurement is written beside the prediction in JSON and HDF5") {
  RunReport report = report_with_every_group();
  MeasuredStep measured;
  measured.source = "a test";
  measured.tokens_per_s_per_gpu = 1000;
  measured.peak_memory_bytes = 70e9;
  report.variants[0].measured = measured;
  const nlohmann::json json = nlohmann::json::parse(render_json(report))["variants"][0];
  REQUIRE(json.contains("measured"));
  CHECK(json["measured"]["source"] == "a test");
  const nlohmann::json& tokens = json["measured"]["metrics"][0];
  CHECK(tokens["metric"] == "tokens_per_s_per_gpu");
  CHECK(tokens["error"].get<double>() ==
        Approx(tokens["predicted"].get<double>() / 1000 - 1).epsilon(1e-12));
  const TempDir dir;
  const auto path = dir.path() / "results.h5";
  write_hdf5(report, path);
  const Hdf5VariantSummary variant = read_hdf5_summary(path).variants.front();
  CHECK(variant.dataset_rows.at("measured") == 2);
  CHECK(std::get<std::string>(variant.attributes.at("measured_source")) == "a test");
  // Without a measurement, JSON has no such key.
  report.variants[0].measured.reset();
  CHECK_FALSE(nlohmann::json::parse(render_json(report))["variants"][0].contains("measured"));
}

TEST_CASE("the console shows a run's registered values, its spot capacity and its price") {
  const RunReport report = report_with_every_group();
  const std::string text = render_console(report);
  const JobResult& run = *report.variants[0].job_result;
  // The rows of the groups this variant has, each cell written from the registered value.
  CHECK_THAT(text, Catch::Contains("spot preemptions, mean (P90)"));
  char goodput[64];
  std::snprintf(goodput, sizeof goodput, "%.3f +- %.3f", run.goodput.mean,
                run.goodput.ci99_half_width);
  CHECK_THAT(text, Catch::Contains(goodput));
  CHECK_THAT(text, Catch::Contains("cost P50 / P90 (USD)"));
  CHECK_THAT(text, Catch::Contains(layout_label(report.variants[0].inputs.plan)));
  // The plan's and the sweep's tables read the same fields.
  const std::string plan = render_plan(report);
  CHECK_THAT(plan, Catch::Contains("time to train P50 / P90 (days)"));
  CHECK_THAT(plan, Catch::Contains(std::string(goodput).substr(0, 5)));  // the mean, "0.9xx"
  CHECK_THAT(render_sweep(report),
             Catch::Contains(largest_share(report.variants[0].outcome.step.breakdown)));
}

}  // namespace fleetsim
