// Derived quantities shared by the console, JSON and HDF5 renderers.
#include "sim/report/report.hpp"

namespace fleetsim {

std::optional<double> speedup_vs_first(const RunReport& report, std::size_t index) {
  if (report.variants.empty() || index >= report.variants.size()) {
    return std::nullopt;
  }
  const StepOutcome& baseline = report.variants.front().outcome;
  const StepOutcome& variant = report.variants[index].outcome;
  const bool comparable = baseline.simulated && variant.simulated &&
                          baseline.step.tokens_per_s > 0 && variant.step.tokens_per_s > 0;
  if (!comparable) {
    return std::nullopt;
  }
  return variant.step.tokens_per_s / baseline.step.tokens_per_s;
}

std::optional<double> scaling_efficiency_vs_first(const RunReport& report, std::size_t index) {
  const std::optional<double> speedup = speedup_vs_first(report, index);
  if (!speedup) return std::nullopt;
  const auto gpus = [](const StepInputs& inputs) {
    return static_cast<double>(inputs.nodes) * inputs.node.gpus;
  };
  return *speedup * gpus(report.variants.front().inputs) / gpus(report.variants[index].inputs);
}

std::string layout_label(const ParallelPlan& plan) {
  const char* recompute = plan.recompute == Recompute::full ? "full" : "none";
  return "dp" + std::to_string(plan.dp) + " zero" + std::to_string(plan.zero_stage) +
         " recompute=" + recompute;
}

}  // namespace fleetsim
