// The study layer: what a run, a sweep, a plan and a memory check mean, tested without the CLI.
#include <algorithm>
#include <atomic>
#include <catch2/catch.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "common/stop_guard.hpp"
#include "scenario/fixture.hpp"
#include "sim/step/step_executor.hpp"
#include "sim/study/study.hpp"

namespace fleetsim {
namespace {

Scenario shipped(const std::string& name) {
  return load_scenario(std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios" / name,
                       testing::source_data());
}

Scenario small_sweep() {
  return load_scenario(std::filesystem::path(FLEETSIM_TEST_DATA_DIR) / "small-sweep.yaml",
                       testing::source_data());
}

}  // namespace

TEST_CASE("a study's variants are the step simulations of the scenario's variants") {
  const Scenario scenario = shipped("h100-vs-b200.yaml");
  std::atomic<std::int64_t> units{0};  // advanced from the variants' threads
  const RunReport report =
      simulate_scenario(scenario, {}, {}, [&units](std::int64_t done) { units += done; });
  REQUIRE(report.variants.size() == scenario.variants.size());
  for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
    CHECK(report.variants[i].name == scenario.variants[i].name);
    CHECK(report.variants[i].outcome == simulate_step(scenario.variants[i].inputs));
  }
  // One unit a step, no run: as many as the variants, all counted.
  CHECK(units == work_units(scenario, {}));
  CHECK(units == static_cast<std::int64_t>(scenario.variants.size()));
  CHECK_FALSE(report.partial);
}

TEST_CASE("spread over two processes, rank 0 reports what one process does") {
  const Scenario scenario = small_sweep();
  const std::string whole = render_json(simulate_scenario(scenario, {}));
  // Rank 1 simulates the odd points and sends them; rank 0 the even ones, and gathers both.
  std::string from_rank_1;
  const Spread one{1, 2, [&](const std::string& mine) {
                     from_rank_1 = mine;
                     return std::vector<std::string>{};
                   }};
  const RunReport odd = simulate_scenario(scenario, {}, one);
  CHECK_FALSE(odd.variants[0].outcome.simulated);  // rank 1 does not simulate point 0
  CHECK(odd.variants[1].outcome.simulated);
  const Spread zero{0, 2, [&](const std::string& mine) {
                      return std::vector<std::string>{mine, from_rank_1};
                    }};
  CHECK(render_json(simulate_scenario(scenario, {}, zero)) == whole);
  // Each process counts its own share of the work.
  CHECK(work_units(scenario, one) + work_units(scenario, zero) == work_units(scenario, {}));
}

TEST_CASE("a rank that fails makes rank 0's study fail with its message") {
  const Scenario scenario = small_sweep();
  const Spread zero{0, 2, [](const std::string& mine) {
                      return std::vector<std::string>{mine, "Ea model failed"};
                    }};
  CHECK_THROWS_WITH(simulate_scenario(scenario, {}, zero),
                    Catch::Contains("rank 1: a model failed"));
}

TEST_CASE("a study stopped before it starts keeps nothing, and says what is left out") {
  const testing::StopGuard guard;
  request_stop(StopReason::interrupt);
  const Scenario scenario = shipped("h100-vs-b200.yaml");
  const RunReport report = simulate_scenario(scenario, {});
  REQUIRE(report.partial);
  CHECK(report.variants.empty());
  CHECK(report.partial->not_finished.size() == scenario.variants.size());
  CHECK(report.partial->first_variant_left_out);
}

TEST_CASE("the memory report is each variant's memory check, nothing replayed") {
  const Scenario scenario = shipped("llama3-70b-one-node.yaml");
  const RunReport report = memory_report(scenario);
  REQUIRE(report.variants.size() == scenario.variants.size());
  for (std::size_t i = 0; i < scenario.variants.size(); ++i) {
    CHECK(report.variants[i].outcome == check_memory(scenario.variants[i].inputs));
    CHECK_FALSE(report.variants[i].outcome.simulated);
  }
}

TEST_CASE("a plan's layouts are ranked by step time, and with a run by expected cost") {
  Scenario scenario = shipped("h100-vs-b200.yaml");
  PlanOptions options;
  options.top = 4;
  const RunReport plan = plan_report(scenario, options);
  REQUIRE(plan.plan);
  REQUIRE(plan.variants.size() == 4);
  for (std::size_t i = 1; i < plan.variants.size(); ++i) {
    CHECK(plan.variants[i - 1].outcome.step.step_time_s <=
          plan.variants[i].outcome.step.step_time_s);
  }
  CHECK(plan_run_units(plan, scenario) == 0);  // no run: block

  // With a priced run, the ranking follows the runs' mean cost.
  const Scenario run = shipped("llama3-70b-pretraining-run.yaml");
  scenario.variants.front().run = run.variants.front().run;
  scenario.variants.front().run->replications = 4;
  REQUIRE(scenario.variants.front().run->priced);
  RunReport ranked = plan_report(scenario, options);
  CHECK(plan_run_units(ranked, scenario) == 16);
  rank_plan_by_run(ranked, scenario, {});
  for (std::size_t i = 1; i < ranked.variants.size(); ++i) {
    CHECK(ranked.variants[i - 1].job_result->cost_usd.mean <=
          ranked.variants[i].job_result->cost_usd.mean);
  }
}

TEST_CASE("a study carries each variant's measurement beside its simulation") {
  const Scenario scenario = testing::load_text(
      testing::kBase +
      "measured: {source: a test, tokens_per_s_per_gpu: 3000, peak_memory: 60GB}\n");
  REQUIRE(scenario.variants.front().measured);
  const RunReport run = simulate_scenario(scenario, {}, {}, {});
  CHECK(run.variants.front().measured == scenario.variants.front().measured);
  const std::string table = render_console(run);
  CHECK_THAT(table, Catch::Contains("predicted vs measured: dgx-h100 (a test)"));
  CHECK_THAT(table, Catch::Contains("tokens/s per GPU"));
  // `fleetsim memory` compares what it has: the memory, not the step it does not replay.
  const RunReport memory = memory_report(scenario);
  CHECK(memory.variants.front().measured == scenario.variants.front().measured);
  CHECK_THAT(render_memory(memory), Catch::Contains("peak memory per GPU (GB)"));
}

TEST_CASE("a run whose given checkpoint interval outlasts it is warned that it never checkpoints") {
  // 1e9 tokens of 256 x 4,096-token steps: 954 steps.
  const std::string run =
      "name: run\nmodel: llama3-8b\n"
      "training: {seq_len: 4096, global_batch: 256, micro_batch: 2, tokens: 1e9}\n"
      "layout: {dp: 8, zero: 3}\n"
      "cluster: {node: dgx-h100, storage: {write: 50GB/s, read: 100GB/s}}\n"
      "run: {interruptions: llama3-405b, checkpoint: 954 steps, detection: 5min, "
      "restart: 10min, replications: 20}\n"
      "compare:\n"
      "  - {name: every 953 steps, run: {checkpoint: 953 steps}}\n"
      "  - {name: young-daly, run: {checkpoint: young_daly}}\n";
  const RunReport report = simulate_scenario(testing::load_text(run), {});
  const auto warned = [&](std::size_t variant) {
    const auto& warnings = report.variants[variant].outcome.warnings;
    return std::any_of(warnings.begin(), warnings.end(), [](const std::string& warning) {
      return warning.find("never checkpoints: the run's 954 steps") != std::string::npos;
    });
  };
  CHECK(warned(0));
  CHECK_FALSE(warned(1));
  // Young-Daly's interval may rightly outlast a short run: its choice, not a mistake.
  CHECK_FALSE(warned(2));
}

TEST_CASE("a run that cannot finish is an answer beside its step, and the other runs stand") {
  // One interruption a GPU-hour on 8 GPUs: 8 an hour. A 10 h restart is then down about
  // 80 times longer than the mean time between them: e^80 tries before one got through, past
  // the e^10 the Monte Carlo plays. The compare entry restarts in 1 min: its exposure, the
  // larger of its downtime's and its segment's, stays near e^0.3. (The agreement fuzzer's
  // regression input, which its replay bounds in time.)
  const Scenario scenario =
      load_scenario(std::filesystem::path(FLEETSIM_SOURCE_DIR) /
                        "tests/fuzz/regressions/fuzz_agreement/run-cannot-finish.yaml",
                    testing::source_data());
  // The progress bar reaches its end: the run left out counts its replications as done.
  std::atomic<std::int64_t> units = 0;
  const RunReport report =
      simulate_scenario(scenario, {}, {}, [&units](std::int64_t done) { units += done; });
  CHECK(units == work_units(scenario, {}));
  REQUIRE(report.variants.size() == 2);
  const VariantReport& endless = report.variants[0];
  CHECK(endless.outcome.simulated);  // its step stands
  CHECK_FALSE(endless.job_result);
  CHECK(std::any_of(endless.outcome.warnings.begin(), endless.outcome.warnings.end(),
                    [](const std::string& warning) {
                      return warning.starts_with("its run cannot be simulated: ");
                    }));
  REQUIRE(report.variants[1].job_result);
  CHECK(report.variants[1].job_result->replications.size() == 20);
}

}  // namespace fleetsim
