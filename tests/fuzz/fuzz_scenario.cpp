// libFuzzer target: the scenario loader on any bytes. A scenario mistake must be a
// ScenarioError (exit 2, one line with its place); anything else escaping the loader (a
// ModelError too, another exception, a crash, undefined behaviour, a leak) is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "sim/scenario/scenario.hpp"
#include "tests/fuzz/scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader takes a file (the loader re-reads a scenario for each variant).
  const std::filesystem::path file = scratch_file(data, size, ".yaml");
  try {
    fleetsim::load_scenario(file, fleetsim::DataPaths{FLEETSIM_SOURCE_DIR});
  } catch (const fleetsim::ScenarioError&) {
  }
  return 0;
}
