// How sure a prediction is: the calibrated inputs it rests on, drawn within their stated
// uncertainty, give a prediction interval for the headline metrics; and each input moved one
// sigma either way, the others at their values, shows which of them moves the result most.
//
// The inputs are the GPU profile's calibrated entries with a sigma above zero that the
// configuration uses (kernel rates and efficiencies, the link efficiencies of the links it has,
// the FP8 entries under FP8), and for runs the interruption rates counted from a published
// history (one input: every cause's rate scaled together, sigma from the causes' Poisson
// sigmas). Each draw takes every input z standard deviations from its value, z a standard
// normal from the draw's own seeded stream: draw i takes the same z whatever the thread count,
// and whatever the non-zero sigmas, so an input's wider sigma widens the interval (a test). Rates
// and efficiencies move by a factor, log-normally: one sigma up is the value plus sigma, one sigma
// down the value over (1 + sigma / value), so a wide sigma (a spec-sheet number's) spreads the
// draws by a factor instead of down to zero or below; overheads and counts that may be zero
// (the SMs a collective holds) move by an amount (value + z sigma). Every draw is kept in its
// range: an efficiency at most 1, an overhead at least 0. Rates written as assumptions, spot
// capacity and degradations have no sigma and stay fixed.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/job/job.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

struct UncertainInput {
  std::string name;  // a profile key ("gemm_efficiency", "link_efficiency.nvlink") or
                     // "interruption_rates"
  double value = 0;
  double sigma = 0;
  double lower = 0;  // the range a draw is kept in
  double upper = 0;
  // Drawn by a factor (log-normal: z sigmas off is the value times (1 + sigma / value)^z), as
  // rates and efficiencies are; else by an amount (normal: value + z sigma), as an overhead
  // that may be zero is.
  bool by_factor = false;
};

// The inputs of a configuration (and its run) that carry an uncertainty, in a fixed order.
std::vector<UncertainInput> uncertain_inputs(const StepInputs& inputs,
                                             const std::optional<RunSpec>& run);

// `inputs` and `run` with input `input` (one of uncertain_inputs') set to `value`.
void set_uncertain_input(const UncertainInput& input, double value, StepInputs& inputs,
                         std::optional<RunSpec>& run);

struct MetricInterval {
  std::string metric;  // "step_time_s", "tokens_per_s", "mfu", "wall_s_mean", "cost_usd_mean"
  double nominal = 0;  // at every input's value
  double low = 0;      // the interval's lower quantile over the draws
  double median = 0;
  double high = 0;
};

struct InputSwing {
  UncertainInput input;
  // Per metric, with the input one sigma below and above its value (kept in its range); NaN
  // where that did not run.
  std::vector<double> minus;
  std::vector<double> plus;
};

struct SensitivityOptions {
  int draws = 100;
  double coverage = 0.9;  // the interval holds this share of the draws: P5 to P95
};

struct Sensitivity {
  int draws = 0;
  double coverage = 0;
  std::vector<std::string> metrics;
  std::vector<MetricInterval> intervals;  // per metric
  // Largest swing first: |plus - minus| of time to train for runs, else of the step time.
  std::vector<InputSwing> swings;
  std::vector<std::vector<double>> samples;  // [draw][metric], NaN for a draw that did not run
  int failed_draws = 0;                      // draws that did not run, left out of the intervals
  std::string failure;        // the first draw (or else swing) that did not run, and why
  std::string not_simulated;  // why, when the nominal configuration or all but a draw do not run
};

// Draws and swings of one configuration. Steps replay with `options` (untraced); runs are
// Monte Carlos on `seed`. A draw or swing that does not run (a drawn interruption rate so high
// that the run would never end) is kept as NaN with its reason and left out of the intervals.
// Throws ModelError for fewer than 2 draws or a coverage outside (0, 1).
Sensitivity sensitivity(const StepInputs& inputs, const std::optional<RunSpec>& run,
                        std::uint64_t seed, const SensitivityOptions& options = {},
                        const StepOptions& step = {});

}  // namespace fleetsim
