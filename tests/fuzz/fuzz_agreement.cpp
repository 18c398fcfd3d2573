// libFuzzer target: `validate` agrees with `run`, `memory` and `plan`. A scenario the loader
// accepts (what `validate` checks) must simulate without a ModelError (what `run` would exit 1
// with, where an input error should have been refused at load with its place), and so must its
// memory report and, unswept, its plan. A mistake found only by a simulation is a finding.
//
// Each accepted input is simulated for at most kWallS seconds (as `run --max-wall` would cut
// it short; what was left out is not checked) and only where its estimate fits kMostBytes (a
// few thousand GPUs of a small step), as `run` refuses a step over the machine's memory before
// simulating it: the loader's bounds on larger clusters are fuzz_scenario's.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>

#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/study/study.hpp"
#include "tests/fuzz/scratch_file.hpp"

namespace {

constexpr double kWallS = 0.5;
constexpr double kMostBytes = 64e6;

std::optional<fleetsim::Scenario> accepted(const std::filesystem::path& file) {
  try {
    return fleetsim::load_scenario(file, fleetsim::DataPaths{FLEETSIM_SOURCE_DIR});
  } catch (const fleetsim::ScenarioError&) {
    return std::nullopt;
  }
}

[[noreturn]] void disagree(const char* what, const char* message) {
  std::fprintf(stderr, "validate accepts this scenario, %s fails: %s\n", what, message);
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::optional<fleetsim::Scenario> scenario = accepted(scratch_file(data, size, ".yaml"));
  if (!scenario) return 0;
  for (const fleetsim::Variant& variant : scenario->variants) {
    if (fleetsim::simulation_bytes_estimate(variant) > kMostBytes) return 0;
  }
  try {
    fleetsim::memory_report(*scenario);
  } catch (const fleetsim::ModelError& error) {
    disagree("memory", error.what());
  }
  // `simulate` for at most kWallS, a stop leaving the rest unchecked.
  const auto bounded = [](const char* command, const auto& simulate) {
    {
      const fleetsim::ResourceWatch watch({kWallS, std::nullopt});
      try {
        simulate();
      } catch (const fleetsim::ModelError& error) {
        disagree(command, error.what());
      } catch (const fleetsim::Stopped&) {
      }
    }
    fleetsim::clear_stop_request();
  };
  bounded("run", [&] { fleetsim::simulate_scenario(*scenario, fleetsim::StepOptions{}); });
  if (!scenario->swept) {
    bounded("plan", [&] { fleetsim::plan_report(*scenario, fleetsim::PlanOptions{}); });
  }
  return 0;
}
