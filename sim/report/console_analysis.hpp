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
std::string measured_section(const std::string& variant, const MeasuredStep& measured,
                             const std::vector<MetricComparison>& comparisons);

}  // namespace fleetsim
