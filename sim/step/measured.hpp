// What a real run of a scenario measured, as its source publishes it (a scenario's measured:
// block), and how the simulated step compares: each metric predicted on the source's own terms
// (its FLOP convention and the peak it divides by, workloads/flop_conventions.hpp) beside the
// measured value, with the signed error. This is how fleetsim is checked against published runs
// (docs/accuracy.md), and how a user checks it against their own cluster.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/step/step_inputs.hpp"
#include "workloads/flop_conventions.hpp"

namespace fleetsim {

struct MeasuredStep {
  std::string source;  // where the figures come from: a document, a commit, a log
  std::optional<double> tokens_per_s_per_gpu;
  std::optional<double> step_time_s;
  struct FlopRate {
    double flops_per_s = 0;  // per GPU
    FlopConvention convention = FlopConvention::megatron;
    bool operator==(const FlopRate&) const = default;
  };
  std::optional<FlopRate> flops_per_gpu;
  struct Utilisation {
    double value = 0;       // a fraction
    double peak_flops = 0;  // per GPU, the peak the source divides by
    FlopConvention convention = FlopConvention::megatron;
    bool operator==(const Utilisation&) const = default;
  };
  std::optional<Utilisation> mfu;
  std::optional<double> peak_memory_bytes;  // per GPU, as the source reports it
  bool operator==(const MeasuredStep&) const = default;
};

// One metric measured and predicted. `predicted` and `error` are empty where the simulation has
// no value (a layout that does not fit has a memory but no step).
struct MetricComparison {
  std::string metric;  // "tokens_per_s_per_gpu", "step_time_s", "tflops_per_gpu", "mfu",
                       // "peak_memory_bytes"
  std::string basis;   // the convention and peak it is counted by ("" where none)
  double measured = 0;
  std::optional<double> predicted;
  std::optional<double> error;  // predicted / measured - 1: positive is optimistic for
                                // throughput, TFLOP/s and MFU, pessimistic for step time
};

// Every metric `measured` gives, in the order above.
std::vector<MetricComparison> compare_measured(const MeasuredStep& measured,
                                               const StepInputs& inputs,
                                               const StepOutcome& outcome);

}  // namespace fleetsim
