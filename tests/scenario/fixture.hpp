// Scenario fixtures written from strings into a private temporary directory, and helpers to load
// them against the presets shipped in the source tree (or a copy of them).
#pragma once

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <iterator>
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

// A minimal valid scenario; tests that plant a mistake in it count lines from here.
inline const std::string kBase =
    "name: test\n"           // 1
    "model: llama3-8b\n"     // 2
    "training:\n"            // 3
    "  seq_len: 4096\n"      // 4
    "  global_batch: 256\n"  // 5
    "  micro_batch: 2\n"     // 6
    "layout:\n"              // 7
    "  dp: 8\n"              // 8
    "  zero: 3\n"            // 9
    "cluster:\n"             // 10
    "  node: dgx-h100\n";    // 11

// The zoo's model `name`, as a scenario loads it.
inline ModelSpec zoo_model(const std::string& name) {
  return load_text(with(kBase, "model: llama3-8b", "model: " + name)).variants[0].inputs.model;
}

// The text of a file shipped in the source tree, to plant a broken copy of it.
inline std::string shipped_file(const std::string& name) {
  std::ifstream in(std::filesystem::path(FLEETSIM_SOURCE_DIR) / name);
  REQUIRE(in);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

}  // namespace fleetsim::testing
