// docs/kernel-accuracy.md: each GPU profile's kernel model against the microbenchmark rows it is
// fitted to (calibration/microbench/<profile>/), as `fleetsim calibrate --kernels` fits it.
#pragma once

#include <filesystem>
#include <string>

namespace fleetsim::docs {

// The page for the source tree at `source`. Throws what the fits throw on a bad input.
std::string kernel_accuracy_page(const std::filesystem::path& source);

}  // namespace fleetsim::docs
