// libFuzzer target: the microbenchmark CSV reader on any bytes. A file it cannot read must be
// a MicrobenchError naming the file and line; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <filesystem>

#include "calibration/microbench.hpp"
#include "tests/fuzz/scratch_file.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::filesystem::path file = scratch_file(data, size, ".csv");
  try {
    fleetsim::read_microbench_file(file);
  } catch (const fleetsim::MicrobenchError&) {
  }
  return 0;
}
