// The console's sections of `fleetsim run --attribute` and `--sensitivity`: what each factor
// adds to a variant's difference from the first, and a variant's prediction interval with the
// inputs that move it most. Each ends with a newline.
#pragma once

#include <string>

#include "sim/analysis/attribution.hpp"
#include "sim/analysis/sensitivity.hpp"

namespace fleetsim {

std::string attribution_section(const Attribution& attribution);
std::string sensitivity_section(const std::string& variant, const Sensitivity& sensitivity);

}  // namespace fleetsim
