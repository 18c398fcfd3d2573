#include "sim/analysis/sensitivity.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "sim/analysis/configuration.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/rng.hpp"
#include "sim/job/job_of_step.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

UncertainInput uncertain(std::string name, double value, double sigma, EntryRange range) {
  const double infinity = std::numeric_limits<double>::infinity();
  // A positive value is uncertain by a factor; one that may be zero, by an amount.
  const bool factor = range != EntryRange::non_negative && value > 0;
  return {std::move(name), value, sigma, 0.0, range == EntryRange::fraction ? 1.0 : infinity,
          factor};
}

// The input `z` standard deviations from its value, kept in its range.
double drawn(const UncertainInput& input, double z) {
  const double value = input.by_factor
                           ? input.value * std::exp(z * std::log1p(input.sigma / input.value))
                           : input.value + z * input.sigma;
  return std::clamp(value, input.lower, input.upper);
}

// Quantile q of sorted samples, interpolating linearly between order statistics.
double quantile(const std::vector<double>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(at));
  const std::size_t above = std::min(below + 1, sorted.size() - 1);
  return sorted[below] + (at - static_cast<double>(below)) * (sorted[above] - sorted[below]);
}

}  // namespace

std::vector<UncertainInput> uncertain_inputs(const StepInputs& inputs,
                                             const std::optional<RunSpec>& run) {
  std::vector<UncertainInput> found;
  const auto add = [&](const std::string& key, EntryRange range) {
    const Calibrated* entry = find_profile_entry(inputs.gpu, key);
    if (entry && entry->sigma > 0)
      found.push_back(uncertain(key, entry->value, entry->sigma, range));
  };
  // (sustained_clock is drawn for attention alone: a GEMM ceiling scaled by it holds its sigma
  // already, and is drawn apart, as if independent of it.)
  for (const StepProfileEntry& entry : step_profile_entries(inputs)) add(entry.key, entry.range);
  if (run) {
    double rate = 0;
    double variance = 0;
    for (const InterruptionCause& cause : run->causes) {
      rate += cause.per_gpu_day;
      variance += cause.per_gpu_day_sigma * cause.per_gpu_day_sigma;
    }
    if (variance > 0) {
      found.push_back(uncertain("interruption_rates", rate, std::sqrt(variance), EntryRange::rate));
    }
  }
  return found;
}

void set_uncertain_input(const UncertainInput& input, double value, StepInputs& inputs,
                         std::optional<RunSpec>& run) {
  if (input.name == "interruption_rates") {
    if (!run) throw ModelError("interruption_rates set on a configuration without a run");
    for (InterruptionCause& cause : run->causes) cause.per_gpu_day *= value / input.value;
    return;
  }
  Calibrated* entry = find_profile_entry(inputs.gpu, input.name);
  if (!entry) throw ModelError("GPU profile " + inputs.gpu.name + " has no entry " + input.name);
  entry->value = value;
}

Sensitivity sensitivity(const StepInputs& inputs, const std::optional<RunSpec>& run,
                        std::uint64_t seed, const SensitivityOptions& options,
                        const StepOptions& step) {
  if (options.draws < 2) throw ModelError("a prediction interval needs at least 2 draws");
  if (!(options.coverage > 0 && options.coverage < 1)) {
    throw ModelError("a prediction interval covers a share of the draws between 0 and 1");
  }
  Sensitivity out;
  out.draws = options.draws;
  out.coverage = options.coverage;
  out.metrics = {"step_time_s", "tokens_per_s", "mfu"};
  const bool priced = run && run->priced;
  if (run) out.metrics.push_back("wall_s_mean");
  if (priced) out.metrics.push_back("cost_usd_mean");
  const StepOptions untraced = step.untraced();
  StepCache steps;  // the draws' steps, and their runs' degraded and shrunk ones
  const auto evaluate = [&](const StepInputs& in, const std::optional<RunSpec>& r) {
    const StepOutcome outcome = steps.simulate(in, untraced);
    if (!outcome.simulated) throw ModelError("does not fit in memory");
    std::vector<double> values{outcome.step.step_time_s, outcome.step.tokens_per_s,
                               outcome.step.mfu};
    if (r) {
      const JobResult result =
          simulate_run_of_step(*r, in, outcome.step.step_time_s, untraced, seed, steps);
      values.push_back(result.wall_s.mean);
      if (priced) values.push_back(result.cost_usd.mean);
    }
    return values;
  };
  std::vector<double> nominal;
  try {
    nominal = evaluate(inputs, run);
  } catch (const ModelError& error) {
    out.not_simulated = error.what();
    return out;
  }
  const std::vector<UncertainInput> uncertain = uncertain_inputs(inputs, run);

  // A draw or swing that does not run (a drawn interruption rate too high for the run ever to
  // end, say) has NaN metrics and its reason kept; the others still count.
  const std::vector<double> not_run(out.metrics.size(), std::numeric_limits<double>::quiet_NaN());
  const auto evaluate_or_not = [&](const StepInputs& in, const std::optional<RunSpec>& r,
                                   std::string& why) {
    try {
      return evaluate(in, r);
    } catch (const ModelError& error) {
      why = error.what();
      return not_run;
    }
  };

  // Draws: each its own stream, every input's standard normal drawn in the inputs' order.
  const auto draws = static_cast<std::size_t>(options.draws);
  out.samples.assign(draws, {});
  std::vector<std::string> draw_failure(draws);
  tbb::parallel_for(std::size_t{0}, draws, [&](std::size_t draw) {
    RngStream rng(seed, "sensitivity", draw);
    StepInputs in = inputs;
    std::optional<RunSpec> r = run;
    for (const UncertainInput& input : uncertain) {
      set_uncertain_input(input, drawn(input, rng.normal()), in, r);
    }
    out.samples[draw] = evaluate_or_not(in, r, draw_failure[draw]);
  });
  for (std::size_t draw = 0; draw < draws; ++draw) {
    if (draw_failure[draw].empty()) continue;
    if (out.failed_draws++ == 0) {
      out.failure = "draw " + std::to_string(draw) + ": " + draw_failure[draw];
    }
  }
  if (draws - static_cast<std::size_t>(out.failed_draws) < 2) {
    out.not_simulated = "has fewer than 2 draws that run (" + out.failure + ")";
    return out;
  }
  const double tail = (1 - options.coverage) / 2;
  for (std::size_t m = 0; m < out.metrics.size(); ++m) {
    std::vector<double> values;
    for (const auto& sample : out.samples) {
      if (!std::isnan(sample[m])) values.push_back(sample[m]);
    }
    std::sort(values.begin(), values.end());
    out.intervals.push_back({out.metrics[m], nominal[m], quantile(values, tail),
                             quantile(values, 0.5), quantile(values, 1 - tail)});
  }

  // Swings: each input one sigma either side, the others at their values.
  out.swings.resize(uncertain.size());
  std::vector<std::string> swing_failure(2 * uncertain.size());
  tbb::parallel_for(std::size_t{0}, 2 * uncertain.size(), [&](std::size_t k) {
    const UncertainInput& input = uncertain[k / 2];
    const double side = k % 2 == 0 ? -1.0 : 1.0;
    StepInputs in = inputs;
    std::optional<RunSpec> r = run;
    set_uncertain_input(input, drawn(input, side), in, r);
    InputSwing& swing = out.swings[k / 2];
    (side < 0 ? swing.minus : swing.plus) = evaluate_or_not(in, r, swing_failure[k]);
  });
  for (std::size_t k = 0; k < swing_failure.size() && out.failure.empty(); ++k) {
    if (!swing_failure[k].empty()) {
      out.failure =
          uncertain[k / 2].name + (k % 2 == 0 ? " -1" : " +1") + " sigma: " + swing_failure[k];
    }
  }
  for (std::size_t i = 0; i < uncertain.size(); ++i) out.swings[i].input = uncertain[i];
  // Largest swing of time to train (runs) or of the step first; one that did not run last.
  const auto wall = std::find(out.metrics.begin(), out.metrics.end(), "wall_s_mean");
  const std::size_t key = wall == out.metrics.end() ? 0 : wall - out.metrics.begin();
  const auto swing_of = [&](const InputSwing& s) {
    const double swing = std::abs(s.plus[key] - s.minus[key]);
    return std::isnan(swing) ? -1.0 : swing;
  };
  std::stable_sort(out.swings.begin(), out.swings.end(),
                   [&](const auto& a, const auto& b) { return swing_of(a) > swing_of(b); });
  return out;
}

}  // namespace fleetsim
