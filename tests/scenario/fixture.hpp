// Scenario fixtures written from strings into a private temporary directory, and helpers to load
// them against the presets shipped in the source tree (or a copy of them).
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>

#include "common/temp_dir.hpp"
#include "sim/scenario/scenario.hpp"

namespace fleetsim::testing {

inline DataPaths source_data() {
  return DataPaths{FLEETSIM_SOURCE_DIR};
}

// A copy of the shipped presets, for tests that plant a broken one next to the good ones.
inline DataPaths copy_of_source_data(const TempDir& dir) {
  const std::filesystem::path source = FLEETSIM_SOURCE_DIR;
  for (const char* sub : {"topology/presets", "calibration/profiles", "calibration/collectives",
                          "workloads/models"}) {
    std::filesystem::create_directories(dir.path() / sub);
    std::filesystem::copy(source / sub, dir.path() / sub,
                          std::filesystem::copy_options::recursive |
                              std::filesystem::copy_options::overwrite_existing);
  }
  return DataPaths{dir.path()};
}

// The error that loading the scenario `file` raises, or nothing when it loads.
inline std::optional<ScenarioError> file_error(const std::filesystem::path& file,
                                               const DataPaths& data = source_data()) {
  try {
    load_scenario(file, data);
  } catch (const ScenarioError& e) {
    return e;
  }
  return std::nullopt;
}

// The error that loading `yaml` raises, or nothing when it loads.
inline std::optional<ScenarioError> load_error(const std::string& yaml,
                                               const DataPaths& data = source_data()) {
  TempDir dir;
  return file_error(dir.write("scenario.yaml", yaml), data);
}

inline Scenario load_text(const std::string& yaml, const DataPaths& data = source_data()) {
  TempDir dir;
  return load_scenario(dir.write("scenario.yaml", yaml), data);
}

// `text` with its first `from` replaced by `to` (which must be there): a scenario with one change.
inline std::string with(std::string text, const std::string& from, const std::string& to) {
  const auto at = text.find(from);
  REQUIRE(at != std::string::npos);
  return text.replace(at, from.size(), to);
}

}  // namespace fleetsim::testing
