#include "sim/step/measured.hpp"

#include <charconv>
#include <string>

namespace fleetsim {
namespace {

// "989", "2250", "312.5": the peak as a source would write it, in TFLOP/s, whatever the locale.
std::string tflops_text(double flops_per_s) {
  char text[32];
  const auto end =
      std::to_chars(text, text + sizeof text, flops_per_s / 1e12, std::chars_format::general, 6);
  return std::string(text, end.ptr);
}

std::optional<double> scaled(std::optional<double> value, double divisor) {
  if (!value) return std::nullopt;
  return *value / divisor;
}

}  // namespace

std::vector<MetricComparison> compare_measured(const MeasuredStep& measured,
                                               const StepInputs& inputs,
                                               const StepOutcome& outcome) {
  const double gpus = static_cast<double>(inputs.nodes) * inputs.node.gpus;
  const std::optional<double> tokens_per_gpu =
      outcome.simulated ? std::optional<double>(outcome.step.tokens_per_s / gpus) : std::nullopt;
  const auto flops_per_gpu = [&](FlopConvention convention) -> std::optional<double> {
    if (!tokens_per_gpu) return std::nullopt;
    return *tokens_per_gpu * flops_per_token(inputs.model, inputs.training.seq_len, convention);
  };
  std::vector<MetricComparison> rows;
  const auto add = [&](std::string metric, std::string basis, double value,
                       std::optional<double> predicted) {
    std::optional<double> error;
    if (predicted && value > 0) error = *predicted / value - 1;
    rows.push_back({std::move(metric), std::move(basis), value, predicted, error});
  };
  if (measured.tokens_per_s_per_gpu) {
    add("tokens_per_s_per_gpu", "", *measured.tokens_per_s_per_gpu, tokens_per_gpu);
  }
  if (measured.step_time_s) {
    add("step_time_s", "", *measured.step_time_s,
        outcome.simulated ? std::optional<double>(outcome.step.step_time_s) : std::nullopt);
  }
  if (const auto& rate = measured.flops_per_gpu) {
    add("tflops_per_gpu", std::string(to_string(rate->convention)), rate->flops_per_s / 1e12,
        scaled(flops_per_gpu(rate->convention), 1e12));
  }
  if (const auto& mfu = measured.mfu) {
    add("mfu",
        std::string(to_string(mfu->convention)) + " of " + tflops_text(mfu->peak_flops) +
            " TFLOP/s",
        mfu->value, scaled(flops_per_gpu(mfu->convention), mfu->peak_flops));
  }
  if (measured.peak_memory_bytes) {
    add("peak_memory_bytes", "", *measured.peak_memory_bytes, outcome.memory.total_bytes);
  }
  return rows;
}

}  // namespace fleetsim
