#include "sim/job/job_of_step.hpp"

#include <optional>

#include "calibration/kernel_cost.hpp"
#include "sim/engine/errors.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

// A shrinking run's step one data-parallel replica short, from the step executor: the replica's
// nodes and its share of the batch gone. 0 (taken as the full step) where a replica is not
// whole nodes; nothing where the job cannot run one replica short (it has one, the smaller
// layout breaks the job's rules, as expert parallelism over dp - 1 can, or does not fit).
std::optional<double> shrunk_step_s(const StepInputs& in, const StepOptions& options,
                                    StepCache& steps) {
  if (in.plan.dp < 2) return std::nullopt;
  const int replica_gpus = in.plan.world_size() / in.plan.dp;
  if (replica_gpus % in.node.gpus != 0) return 0.0;
  StepInputs shrunk = in;
  shrunk.plan.dp -= 1;
  shrunk.training.global_batch -= in.training.global_batch / in.plan.dp;
  shrunk.nodes -= replica_gpus / in.node.gpus;
  try {
    const StepOutcome outcome = steps.simulate(shrunk, options);
    if (outcome.simulated) return outcome.step.step_time_s;
  } catch (const ModelError&) {
  }
  return std::nullopt;
}

// A run's step with degraded hardware present, from the step executor: every GPU computing
// that much slower, or every NIC down to its remaining bandwidth (sim/job/job.hpp says why).
double degraded_step_s(const StepInputs& in, const Degradation& degradation,
                       const StepOptions& options, StepCache& steps) {
  StepInputs degraded = in;
  if (degradation.kind == Degradation::Kind::compute) {
    degraded.gpu = slowed(in.gpu, degradation.fraction);
  } else {
    degraded.node.nic_bytes_per_s *= 1 - degradation.fraction;
  }
  return steps.simulate(degraded, options).step.step_time_s;
}

}  // namespace

JobSpec job_of_step(const RunSpec& run, const StepInputs& inputs, double step_s,
                    const StepOptions& options, std::vector<std::string>& warnings,
                    StepCache& steps) {
  const StepOptions untraced = options.untraced();
  RunStepTimes times{.healthy_s = step_s};
  if (run.when_short == ShortagePolicy::shrink) {
    times.shrunk_s = shrunk_step_s(inputs, untraced, steps);
  }
  for (const Degradation& degradation : run.degradations) {
    times.degraded_s.push_back(degraded_step_s(inputs, degradation, untraced, steps));
  }
  JobSpec job =
      job_spec(run, inputs.model, inputs.training, inputs.plan, inputs.node, inputs.nodes, times);
  if (run.when_short == ShortagePolicy::shrink && !times.shrunk_s) {
    warnings.push_back(
        "cannot shrink: one data-parallel replica short, the layout does not run (one "
        "replica, the job's rules, or memory); the run waits for repairs instead");
  }
  return job;
}

JobResult simulate_run_of_step(const RunSpec& run, const StepInputs& inputs, double step_s,
                               const StepOptions& options, std::uint64_t seed, StepCache& steps) {
  std::vector<std::string> warnings;
  return simulate_job(job_of_step(run, inputs, step_s, options, warnings, steps), run.replications,
                      seed);
}

}  // namespace fleetsim
