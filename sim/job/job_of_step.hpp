// A run's job from its simulated step: what the step executor must replay besides the healthy
// step (the step one data-parallel replica short when the run shrinks, the step with degraded
// hardware present) before the Monte Carlo can run.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "sim/job/job.hpp"
#include "sim/step/step_cache.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

// The job of `run` on `inputs`, whose healthy step takes `step_s` (jitter not included), with
// its shrunk and degraded steps replayed by the step executor. Where the layout cannot run one
// replica short (one replica, the job's rules, memory), the job waits for repairs instead and
// says so in `warnings`. Those steps come from `steps`, which other runs on the same step share.
JobSpec job_of_step(const RunSpec& run, const StepInputs& inputs, double step_s,
                    const StepOptions& options, std::vector<std::string>& warnings,
                    StepCache& steps);

// The Monte Carlo of that job: its run's replications on `seed`, the warnings dropped (what
// the analyses compare many configurations by, sharing `steps` among them).
JobResult simulate_run_of_step(const RunSpec& run, const StepInputs& inputs, double step_s,
                               const StepOptions& options, std::uint64_t seed, StepCache& steps);

}  // namespace fleetsim
