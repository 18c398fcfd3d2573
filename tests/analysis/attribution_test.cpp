#include "sim/analysis/attribution.hpp"

#include <tbb/global_control.h>

#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>

#include "scenario/fixture.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/step_executor.hpp"

using namespace fleetsim;

namespace {

Scenario shipped(const std::string& name) {
  return load_scenario(std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / name,
                       testing::source_data());
}

AttributionSide side(const Variant& variant) {
  return {variant.name, variant.inputs, variant.run};
}

double sum_of(const Attribution& a, std::size_t metric) {
  double sum = 0;
  for (const auto& part : a.parts) sum += part[metric];
  return sum;
}

double part_of(const Attribution& a, Factor factor, std::size_t metric = 0) {
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    if (a.factors[i] == factor) return a.parts[i][metric];
  }
  FAIL("no factor " << to_string(factor));
  return 0;
}

}  // namespace

TEST_CASE("attribution: Shapley values of games with known values") {
  // Additive: each player's own worth.
  const std::vector<double> additive = {0, 1, 2, 3, 4, 5, 6, 7};  // v(S) = S's bits weighed 1,2,4
  const auto phi = shapley_values(3, additive);
  CHECK(phi[0] == Approx(1));
  CHECK(phi[1] == Approx(2));
  CHECK(phi[2] == Approx(4));
  // Only the two first players together make anything: they split it, the third gets nothing.
  std::vector<double> pair(8, 0.0);
  pair[0b011] = pair[0b111] = 6;
  const auto split = shapley_values(3, pair);
  CHECK(split[0] == Approx(3));
  CHECK(split[1] == Approx(3));
  CHECK(split[2] == Approx(0).margin(1e-15));
  // Glove game: player 0 holds a left glove, 1 and 2 right ones; a pair is worth 1.
  std::vector<double> gloves(8, 0.0);
  gloves[0b011] = gloves[0b101] = gloves[0b111] = 1;
  const auto glove = shapley_values(3, gloves);
  CHECK(glove[0] == Approx(2.0 / 3));
  CHECK(glove[1] == Approx(1.0 / 6));
  CHECK(glove[2] == Approx(1.0 / 6));
  // Any game: the values add up to v(all) - v(none).
  RngStream rng(7, "game");
  std::vector<double> random(std::size_t{1} << 6);
  for (double& v : random) v = rng.normal();
  const auto values = shapley_values(6, random);
  CHECK(std::accumulate(values.begin(), values.end(), 0.0) ==
        Approx(random.back() - random.front()).margin(1e-12));
  CHECK_THROWS_AS(shapley_values(3, std::vector<double>(7)), ModelError);
}

TEST_CASE("attribution: every field of every shipped variant belongs to a factor") {
  for (const auto& entry : std::filesystem::directory_iterator(
           std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios")) {
    const Scenario scenario = load_scenario(entry.path(), testing::source_data());
    const Variant& base = scenario.variants.front();
    for (const Variant& variant : scenario.variants) {
      INFO(entry.path().filename().string() << ": " << variant.name);
      StepInputs inputs = base.inputs;
      std::optional<RunSpec> run = base.run;
      for (Factor factor : kFactors) take_factor(factor, inputs, run, variant.inputs, variant.run);
      StepInputs expected = variant.inputs;
      // Only names are left: the simulation reads none of them.
      for (StepInputs* in : {&inputs, &expected}) {
        in->node.name = in->node.description = in->node.source = in->node.gpu_profile = "";
        in->gpu.name = in->gpu.description = "";
      }
      CHECK(inputs == expected);
      CHECK(run == variant.run);
    }
  }
}

TEST_CASE("attribution: no field is in two factors") {
  // Across the shipped compares (H100, B200, MI300X and H200 nodes, layouts, runs): taking one
  // factor from the variant and then another never undoes the first.
  for (const char* file : {"llama3-70b-one-node.yaml", "llama3-405b-16k-run.yaml",
                           "llama3-70b-pretraining-run.yaml", "llama3-70b-lora-one-gpu.yaml"}) {
    const Scenario scenario = shipped(file);
    const Variant& base = scenario.variants.front();
    for (const Variant& variant : scenario.variants) {
      for (Factor first : kFactors) {
        StepInputs once = base.inputs;
        std::optional<RunSpec> run_once = base.run;
        take_factor(first, once, run_once, variant.inputs, variant.run);
        for (Factor second : kFactors) {
          if (second == first) continue;
          INFO(file << ": " << variant.name << ": " << to_string(first) << " then "
                    << to_string(second));
          StepInputs twice = once;
          std::optional<RunSpec> run_twice = run_once;
          take_factor(second, twice, run_twice, base.inputs, base.run);
          // Taking `second` back from the base keeps what `first` took from the variant.
          StepInputs first_only = base.inputs;
          std::optional<RunSpec> run_first_only = base.run;
          take_factor(first, first_only, run_first_only, variant.inputs, variant.run);
          CHECK(twice == first_only);
          CHECK(run_twice == run_first_only);
        }
      }
    }
  }
}

TEST_CASE("attribution: step and run factors together, the same on one thread and two") {
  // tests/data/small-run.yaml against B200 nodes with hourly checkpoints.
  std::ifstream file(std::filesystem::path(FLEETSIM_TEST_DATA_DIR) / "small-run.yaml");
  const std::string base((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const Scenario scenario = testing::load_text(base + R"(compare:
  - name: b200, hourly checkpoints
    cluster: {node: dgx-b200}
    run: {checkpoint: 1h}
)");
  const auto attribute_on = [&](int threads) {
    tbb::global_control limit(tbb::global_control::max_allowed_parallelism, threads);
    return attribute(side(scenario.variants[0]), side(scenario.variants[1]), scenario.seed);
  };
  const Attribution a = attribute_on(2);
  REQUIRE(a.not_attributed.empty());
  std::size_t step_factors = 0;
  for (Factor factor : a.factors) step_factors += !is_run_factor(factor);
  REQUIRE(step_factors >= 3);
  REQUIRE(a.factors.back() == Factor::checkpoints);
  CHECK(a.counterfactuals ==
        (std::size_t{1} << step_factors) + (std::size_t{1} << a.factors.size()));
  for (std::size_t m = 0; m < a.metrics.size(); ++m) {
    INFO(a.metrics[m]);
    CHECK(sum_of(a, m) ==
          Approx(a.variant_values[m] - a.baseline_values[m]).epsilon(1e-12).margin(1e-9));
  }
  CHECK(part_of(a, Factor::checkpoints, 0) == 0);  // the checkpoint policy leaves the step be
  CHECK(part_of(a, Factor::compute, 1) < 0);       // a faster step, a shorter run
  const Attribution one = attribute_on(1);
  CHECK(one.parts == a.parts);
  CHECK(one.baseline_values == a.baseline_values);
}

TEST_CASE("attribution: H100 against B200 adds up to the simulated difference, and swaps") {
  const Scenario scenario = shipped("h100-vs-b200.yaml");
  const Variant& h100 = scenario.variants[0];
  const Variant& b200 = scenario.variants[1];
  const Attribution a = attribute(side(h100), side(b200), scenario.seed);
  REQUIRE(a.not_attributed.empty());
  REQUIRE(a.metrics == std::vector<std::string>{"step_time_s"});
  const double h100_step = simulate_step(h100.inputs).step.step_time_s;
  const double b200_step = simulate_step(b200.inputs).step.step_time_s;
  CHECK(a.baseline_values[0] == h100_step);
  CHECK(a.variant_values[0] == b200_step);
  // No residual: the parts are the whole difference.
  CHECK(sum_of(a, 0) == Approx(b200_step - h100_step).epsilon(1e-12));
  // Every factor that differs is a player, each counterfactual's step simulated once.
  CHECK(a.counterfactuals == std::size_t{1} << a.factors.size());
  CHECK(a.factors.size() >= 4);
  // Faster tensor cores are most of B200's lead on a compute-bound step.
  CHECK(part_of(a, Factor::compute) < 0);
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    CHECK(std::abs(a.parts[i][0]) <= std::abs(part_of(a, Factor::compute)));
  }
  // Both run the same layout: more HBM buys nothing at a fixed layout, exactly.
  CHECK(part_of(a, Factor::memory_and_layout) == Approx(0).margin(1e-12));

  const Attribution swapped = attribute(side(b200), side(h100), scenario.seed);
  REQUIRE(swapped.factors == a.factors);
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    INFO(to_string(a.factors[i]));
    CHECK(swapped.parts[i][0] == Approx(-a.parts[i][0]).margin(1e-12));
  }
}

TEST_CASE("attribution: a difference in one factor is all that factor's") {
  const Scenario scenario = testing::load_text(R"(
name: oversubscribed
model: llama3-8b
training: {seq_len: 4096, global_batch: 64, micro_batch: 2}
layout: {dp: 16, zero: 3}
cluster:
  node: dgx-h100
  nodes: 2
  fabric: {kind: rail-fat-tree, link: 400Gbps}
compare:
  - name: 4 to 1 oversubscribed, 100 Gb/s
    cluster: {fabric: {oversubscription: 4, link: 100Gbps}}
)");
  const Attribution a = attribute(side(scenario.variants[0]), side(scenario.variants[1]), 1);
  REQUIRE(a.not_attributed.empty());
  REQUIRE(a.factors == std::vector<Factor>{Factor::network});
  CHECK(a.parts[0][0] == a.variant_values[0] - a.baseline_values[0]);
  CHECK(a.parts[0][0] > 0);  // a slower fabric never speeds a step up
}

TEST_CASE("attribution: a run's time and cost split between checkpoints and spot capacity") {
  const Scenario scenario = shipped("llama3-70b-pretraining-run.yaml");
  const Variant& on_demand = scenario.variants[0];  // Young-Daly
  const Variant& spot = scenario.variants[4];       // spot, every 30 min
  REQUIRE(spot.name == "spot, every 30 min");
  const Attribution a = attribute(side(on_demand), side(spot), scenario.seed);
  REQUIRE(a.not_attributed.empty());
  REQUIRE(a.factors == std::vector<Factor>{Factor::checkpoints, Factor::spot});
  REQUIRE(a.metrics == std::vector<std::string>{"step_time_s", "wall_s_mean", "cost_usd_mean"});
  // One step replayed (nothing in it differs), four Monte Carlos.
  CHECK(a.counterfactuals == 1 + 4);
  for (std::size_t m = 0; m < a.metrics.size(); ++m) {
    INFO(a.metrics[m]);
    CHECK(sum_of(a, m) ==
          Approx(a.variant_values[m] - a.baseline_values[m]).epsilon(1e-12).margin(1e-9));
  }
  CHECK(a.parts[0][0] == 0);  // neither changes the step
  CHECK(a.parts[1][0] == 0);
  CHECK(part_of(a, Factor::spot, 1) > 0);  // preemptions lengthen the run
  CHECK(part_of(a, Factor::spot, 2) < 0);  // at half the price per GPU-hour
  const Attribution swapped = attribute(side(spot), side(on_demand), scenario.seed);
  for (std::size_t i = 0; i < a.factors.size(); ++i) {
    for (std::size_t m = 0; m < a.metrics.size(); ++m) {
      CHECK(swapped.parts[i][m] == Approx(-a.parts[i][m]).margin(1e-9));
    }
  }
}

TEST_CASE("attribution: a counterfactual that does not run is named, not guessed") {
  // ZeRO 3 on one DGX H100, against ZeRO 1 on a B200 node or on the same H100 node.
  const std::string base = R"(
name: tiny memory
model: llama3-8b
training: {seq_len: 4096, global_batch: 64, micro_batch: 2}
layout: {dp: 8, zero: 3}
cluster: {node: dgx-h100}
compare:
  - name: zero1 on )";
  const Scenario scenario =
      testing::load_text(base + "b200\n    layout: {zero: 1}\n    cluster: {node: dgx-b200}\n");
  // ZeRO 1 of an 8B model needs 109 GB a GPU: it fits B200's HBM, not H100's, and the HBM moves
  // with the layout, so every counterfactual runs a layout where it fits.
  const Attribution a = attribute(side(scenario.variants[0]), side(scenario.variants[1]), 1);
  INFO(a.not_attributed);
  CHECK(a.not_attributed.empty());

  const Scenario too_big = testing::load_text(base + "h100\n    layout: {zero: 1}\n");
  const Attribution refused = attribute(side(too_big.variants[0]), side(too_big.variants[1]), 1);
  CHECK(refused.not_attributed == "zero1 on h100 does not fit in memory");
  CHECK(refused.parts.empty());
}
