// Why two variants differ: the difference in step time (and, for runs, in time and cost to
// train) split among its causes by counterfactual simulations, combined as Shapley values.
//
// The inputs of a variant fall into factors (Factor), each a set of fields that every field of
// a scenario belongs to exactly once. A counterfactual takes some factors from the variant and
// the rest from the baseline; the value of a set S of factors is a metric of the counterfactual
// taking S from the variant. A factor's Shapley value is its marginal effect averaged over every
// order in which the differing factors could be swapped in one at a time:
//   phi_i = sum over S not holding i of |S|! (n - |S| - 1)! / n! (v(S + i) - v(S)),
// so the values add up to v(all) - v(none), the simulated difference, with nothing left over,
// and swapping baseline and variant negates them. A factor differs when what the simulation
// reads of it does (configuration.hpp: not a name, a source, a sigma, or the efficiency of a
// link neither side has). Every one of the 2^n counterfactuals is simulated (n differing
// factors, at most kMaxFactors): each step once per set of step factors; for runs, each
// counterfactual's Monte Carlo (and the steps one replica short or with degraded hardware that
// its job needs), all on the scenario's seed with one replication count, so that between
// counterfactuals of one GPU count and one interruption rate the parts are differences between
// the same interruption histories, not noise.
//
// HBM capacity moves with the layout (and the model, recipe, GPU count and tokens to train, the
// workload the layout runs; "memory, workload, layout" on the console): what more memory
// buys is the layout it lets a variant run (less recomputation, bigger micro-batches, less
// sharding), and a counterfactual pairing a layout with a memory it does not fit in has no
// step time.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "sim/job/job.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

enum class Factor {
  compute,        // peak FLOP/s, GEMM and attention efficiencies, launches, SMs collectives hold
  hbm_bandwidth,  // HBM bandwidth and the share of it streaming kernels reach
  scale_up,       // NVLink / xGMI: the GPU fabric, its rates and efficiencies, NVLS
  host,           // PCIe, host memory bandwidth and CPUs
  network,        // NICs, their efficiencies and the fabric between nodes
  collective_library,  // the collective library's latencies and algorithm tables
  memory_and_layout,   // HBM and host capacity, layout, micro-batch, model, recipe, GPU count
  failures,            // interruption causes and rates, detection, restart, repair, jitter
  recovery,            // hot spares, shrink or wait, eviction of degraded nodes
  checkpoints,         // checkpoint policy, write mode and storage rates
  spot,                // spot capacity: preemptions, notice, capacity return
  price,               // the prices per GPU-hour
};
inline constexpr std::array<Factor, 12> kFactors = {Factor::compute,
                                                    Factor::hbm_bandwidth,
                                                    Factor::scale_up,
                                                    Factor::host,
                                                    Factor::network,
                                                    Factor::collective_library,
                                                    Factor::memory_and_layout,
                                                    Factor::failures,
                                                    Factor::recovery,
                                                    Factor::checkpoints,
                                                    Factor::spot,
                                                    Factor::price};
// "compute", "hbm_bandwidth", ...: the names the JSON and HDF5 results use.
const char* to_string(Factor factor);
// "HBM bandwidth", "NVLink / xGMI", ...: the names the console uses.
const char* label(Factor factor);

// A factor of a run: it changes nothing in the step.
bool is_run_factor(Factor factor);

// `to` with `factor`'s fields taken from `from` (the run's too where both have one).
void take_factor(Factor factor, StepInputs& to, std::optional<RunSpec>& to_run,
                 const StepInputs& from, const std::optional<RunSpec>& from_run);

// The Shapley value of each of `players` players of the game whose value for coalition S
// (bit i set: player i in it) is value[S]; value has 2^players entries.
std::vector<double> shapley_values(std::size_t players, const std::vector<double>& value);

// The most factors a comparison is attributed over: 2^12 counterfactuals.
inline constexpr std::size_t kMaxFactors = kFactors.size();

struct AttributionSide {
  std::string name;
  StepInputs inputs;
  std::optional<RunSpec> run;
};

struct Attribution {
  std::string baseline;
  std::string variant;
  std::vector<Factor> factors;  // those in which the two differ, in kFactors' order
  // What is attributed: "step_time_s", then with runs on both sides "wall_s_mean" and, when
  // both are priced, "cost_usd_mean".
  std::vector<std::string> metrics;
  std::vector<double> baseline_values;  // per metric
  std::vector<double> variant_values;
  std::vector<std::vector<double>> parts;  // [factor][metric], adding up to the difference
  std::size_t counterfactuals = 0;  // configurations simulated: steps, and runs' Monte Carlos
  std::string not_attributed;       // why, when it could not be (empty: attributed)
};

// Attributes `variant`'s difference from `baseline`. Steps replay with `options` (untraced);
// runs are Monte Carlos on `seed` of the larger of the two replication counts (the ends' values
// are then those of that count). When a counterfactual does not fit in memory or breaks the
// job's rules, the result says which, in not_attributed. Throws ModelError if a field the
// simulation reads belongs to no factor (a test keeps that from happening).
Attribution attribute(const AttributionSide& baseline, const AttributionSide& variant,
                      std::uint64_t seed, const StepOptions& options = {});

}  // namespace fleetsim
