// How a GPU profile file (calibration/profiles/<name>.yaml) writes its entries, and how a fit
// rewrites one entry of it in place (`fleetsim calibrate --write`).
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "calibration/gpu_profile.hpp"

namespace fleetsim {

// The quantity of the entry a profile names `key` (kProfileEntryKeys, kFp8Entries'
// "fp8.<entry>", "link_efficiency.<kind>"); nothing for a key profiles do not have.
std::optional<ProfileQuantity> profile_entry_quantity(std::string_view key);
// The unit a fit writes `key`'s value in: "us" (durations), "TFLOPS" (rates), or "" (plain
// numbers and fractions).
std::string profile_entry_unit(const std::string& key);
// `value` of entry `key` as the profile writes it, unit included ("5.564us", "732.707TFLOPS",
// "0.891").
std::string profile_entry_text(const std::string& key, double value);

// `text`, a GPU profile read from `file`, with the {value, sigma, provenance} entry of
// `parameter` ("nvls_efficiency", "p2p_efficiency", "link_efficiency.<kind>", or a kernel
// entry: "gemm_efficiency", "gemm_k_overhead", "kernel_launch", ...) replaced by
// `entry`: the entry's own lines (its comments included) give way to the new ones; every other
// line, comment and line ending stays as it was. Throws ScenarioError when the entry is not there
// (a fit replaces what the profile already claims) or sits in a flow-style map.
std::string with_profile_entry(const std::string& text, const std::string& file,
                               const std::string& parameter, const Calibrated& entry);

}  // namespace fleetsim
