// The console's sections of `fleetsim run --attribute` and `--sensitivity`: what each factor
// adds to a variant's difference from the first, and a variant's prediction interval with the
// inputs that move it most; and of a measured: block, the prediction beside the measurement.
// Each ends with a newline.
#pragma once

#include <string>
#include <vector>

#include "sim/analysis/attribution.hpp"
#include "sim/analysis/sensitivity.hpp"
#include "sim/step/measured.hpp"

namespace fleetsim {

std::string attribution_section(const Attribution& attribution);
std::string sensitivity_section(const std::string& variant, const Sensitivity& sensitivity);
// How a measured metric reads, here and on the accuracy page (tools/accuracy): its title with
// its unit and basis, and its values as text.
struct MeasuredMetricFormat {
  std::string title;
  std::string (*text)(double);
};
MeasuredMetricFormat measured_metric_format(const MetricComparison& comparison);
std::string measured_section(const std::string& variant, const MeasuredStep& measured,
                             const std::vector<MetricComparison>& comparisons);

}  // namespace fleetsim
