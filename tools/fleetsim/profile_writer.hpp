// Writing fitted entries into a GPU profile file, shared by the collective and kernel fits.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "calibration/gpu_profile.hpp"
#include "sim/scenario/scenario.hpp"

namespace fleetsim {

// "fnv1a64 <16 hex digits>" of a file's bytes: how a provenance names its input.
std::string file_fingerprint(const std::string& path);

// The value of `key` in a loaded profile: "gemm_efficiency", "kernel_launch", "nvls_efficiency",
// "link_efficiency.<kind>", ... ModelError for a key no fit writes.
double profile_value(const GpuProfile& profile, const std::string& key);

// Prints each entry as it would read in the file of GPU profile `gpu` and, with `write`, puts
// them there in place of the old entries' lines (atomically, keeping every other line and the
// file's permissions); the written profile must then load and read each value back, or the old
// text goes back. A symbolic link to the file stays a link.
void put_profile_entries(const DataPaths& data, const std::string& gpu,
                         const std::vector<std::pair<std::string, Calibrated>>& entries,
                         bool write);

}  // namespace fleetsim
