// Helpers for tests that compare a folded step with the same step every rank replayed.
#pragma once

#include <algorithm>
#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "sim/step/step_executor.hpp"

namespace fleetsim::testing {

// The step folded (the default) and with every rank replayed (StepOptions::fold off).
inline std::pair<StepResult, StepResult> folded_and_unfolded(const StepInputs& in) {
  StepOptions every_rank;
  every_rank.fold = false;
  const StepOutcome folded = simulate_step(in);
  const StepOutcome unfolded = simulate_step(in, every_rank);
  REQUIRE(folded.simulated);
  REQUIRE(unfolded.simulated);
  return {folded.step, unfolded.step};
}

// The bytes the step's traffic moved over the link named `name` (0 where none crossed it).
inline double link_bytes(const StepResult& step, const std::string& name) {
  const auto link = std::find_if(step.links.begin(), step.links.end(),
                                 [&](const LinkUsage& usage) { return usage.name == name; });
  return link == step.links.end() ? 0.0 : link->bytes;
}

}  // namespace fleetsim::testing
