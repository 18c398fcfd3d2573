// A variant's results survive the trip to bytes and back, every field and every bit.
#include <algorithm>
#include <catch2/catch.hpp>
#include <filesystem>

#include "scenario/fixture.hpp"
#include "sim/engine/errors.hpp"
#include "sim/job/job_of_step.hpp"
#include "sim/report/report.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {

TEST_CASE("a variant's results read back from bytes as they were written") {
  const Scenario scenario = load_scenario(
      std::filesystem::path(FLEETSIM_SOURCE_DIR) / "scenarios/llama3-70b-pretraining-run.yaml",
      testing::source_data());
  Variant spot = scenario.variants[4];
  REQUIRE(spot.run);
  REQUIRE(spot.run->spot);
  // Every field set: a traced step, degraded hardware evicted after a while.
  spot.run->degradations = {{"slow GPU", Degradation::Kind::compute, 0.1, 1e-4, "test"}};
  spot.run->evict_degraded_after_s = 1800;
  StepOptions traced;
  traced.trace_ranks = 2;
  VariantReport written{spot.name, spot.inputs, simulate_step(spot.inputs, traced), spot.run};
  REQUIRE(written.outcome.simulated);
  const StepResult& step = written.outcome.step;
  REQUIRE_FALSE(step.trace.empty());
  REQUIRE(std::any_of(step.trace.begin(), step.trace.end(),
                      [](const TraceSlice& slice) { return slice.collective >= 0; }));
  REQUIRE_FALSE(step.trace_comm_load.empty());
  REQUIRE_FALSE(step.trace_memory.empty());
  REQUIRE(step.trace_memory.front().state_bytes > 0);
  REQUIRE_FALSE(step.trace_link_load.empty());
  StepCache steps;
  written.job = job_of_step(*spot.run, spot.inputs, written.outcome.step.step_time_s, {},
                            written.outcome.warnings, steps);
  REQUIRE(written.job->degradations.front().step_s > 0);
  written.job_result = simulate_job(*written.job, 20, scenario.seed);
  written.outcome.warnings.push_back("a warning, so that the list is not empty");
  // Every part of the breakdown apart from the others (this dense job exposes no context- or
  // expert-parallel time of its own).
  StepBreakdown& parts = written.outcome.step.breakdown;
  parts.exposed_cp_s = 0.125;
  parts.exposed_ep_s = 0.25;
  parts.exposed_host_s = 0.375;
  written.inputs.plan.vpp = 2;  // as a re-planned point's layout would differ
  written.inputs.training.micro_batch = 2;

  RunReport before;
  before.variants = {VariantReport{"first", spot.inputs, {}, std::nullopt}, written};
  RunReport after;
  after.variants = {VariantReport{"first", spot.inputs, {}, std::nullopt},
                    VariantReport{spot.name, spot.inputs, {}, spot.run}};
  results_from_bytes(results_to_bytes(before, {1}), after);
  const VariantReport& read = after.variants[1];
  CHECK(read.outcome == written.outcome);
  CHECK(read.job == written.job);
  CHECK(read.job_result == written.job_result);
  CHECK(read.inputs == written.inputs);
  CHECK(render_json(before) == render_json(after));

  // A variant that did not run reads back as one that did not run, over one that did.
  after.variants[0] = written;
  results_from_bytes(results_to_bytes(before, {0}), after);
  CHECK_FALSE(after.variants[0].outcome.simulated);
  CHECK_FALSE(after.variants[0].job);
  CHECK_FALSE(after.variants[0].job_result);

  CHECK_THROWS_AS(results_from_bytes("not an archive", after), ModelError);
  RunReport smaller;
  smaller.variants = {written};
  CHECK_THROWS_AS(results_from_bytes(results_to_bytes(before, {1}), smaller), ModelError);
}

}  // namespace fleetsim
