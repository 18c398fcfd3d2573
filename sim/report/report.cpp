// Derived quantities shared by the console, JSON and HDF5 renderers.
#include "sim/report/report.hpp"

#include <algorithm>
#include <utility>
#include <vector>

namespace fleetsim {

std::size_t planned_variants(const RunReport& report) {
  return report.variants.size() + (report.partial ? report.partial->not_finished.size() : 0);
}

std::optional<double> speedup_vs_first(const RunReport& report, std::size_t index) {
  if (report.variants.empty() || index >= report.variants.size() ||
      (report.partial && report.partial->first_variant_left_out)) {
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
  const auto gpus = [](const VariantReport& variant) {
    return static_cast<double>(variant.inputs.nodes) * variant.inputs.node.gpus;
  };
  const double first_gpus = gpus(report.variants.front());
  const bool gpu_counts_differ =
      std::any_of(report.variants.begin(), report.variants.end(),
                  [&](const VariantReport& v) { return gpus(v) != first_gpus; });
  // Between variants of one GPU count it would only repeat the speed-up under another name.
  if (!speedup || !gpu_counts_differ) return std::nullopt;
  return *speedup * first_gpus / gpus(report.variants[index]);
}

std::optional<double> scaling_efficiency_in_sweep(const RunReport& report, std::size_t index) {
  const VariantReport& point = report.variants[index];
  if (!point.outcome.simulated) return std::nullopt;
  const auto gpus = [](const VariantReport& v) {
    return static_cast<double>(v.inputs.nodes) * v.inputs.node.gpus;
  };
  // Points that differ only in their size: the same node, GPU and model, and the same value on
  // every swept field but those that set the GPU count.
  const auto same_but_size = [&](const VariantReport& v) {
    if (v.inputs.node.name != point.inputs.node.name ||
        v.inputs.gpu.name != point.inputs.gpu.name ||
        v.inputs.model.name != point.inputs.model.name || v.swept.size() != point.swept.size()) {
      return false;
    }
    for (std::size_t a = 0; a < v.swept.size(); ++a) {
      const std::string& path = v.swept[a].first;
      if (path == "cluster.nodes" || path == "layout.dp") continue;
      if (v.swept[a].second != point.swept[a].second) return false;
    }
    return true;
  };
  const VariantReport* smallest = nullptr;
  for (const VariantReport& v : report.variants) {
    if (!v.outcome.simulated || !same_but_size(v)) continue;
    if (!smallest || gpus(v) < gpus(*smallest)) smallest = &v;
  }
  // A smaller point that a stop left out might have been the baseline.
  if (report.partial) {
    for (const VariantReport& v : report.partial->not_finished) {
      if (same_but_size(v) && gpus(v) < gpus(*smallest)) return std::nullopt;
    }
  }
  const double per_gpu = point.outcome.step.tokens_per_s / gpus(point);
  return per_gpu / (smallest->outcome.step.tokens_per_s / gpus(*smallest));
}

std::string largest_share(const StepBreakdown& parts) {
  std::vector<std::pair<const char*, double>> shares{{"compute", parts.compute_s}};
  for (const ExposedPart& part : kExposedParts)
    shares.emplace_back(part.share, parts.*part.seconds);
  shares.emplace_back("idle (bubble, waits)", parts.idle_s);
  const auto* largest = &shares[0];
  for (const auto& share : shares) {
    if (share.second > largest->second) largest = &share;
  }
  return largest->first;
}

}  // namespace fleetsim
