// libFuzzer target: the scenario loader on any bytes. A scenario mistake must be a
// ScenarioError (exit 2, one line); anything else escaping the loader (another exception, a
// crash, undefined behaviour, a leak) is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "sim/engine/errors.hpp"
#include "sim/scenario/scenario.hpp"
#include "tests/fuzz/scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  // The reader takes a file (the loader re-reads a scenario for each variant).
  const std::filesystem::path file = scratch_file(data, size, ".yaml");
  try {
    fleetsim::load_scenario(file, fleetsim::DataPaths{FLEETSIM_SOURCE_DIR});
  } catch (const fleetsim::ScenarioError&) {
  } catch (const fleetsim::ModelError&) {  // a job the model refuses: exit 1, one line
  }
  return 0;
}
