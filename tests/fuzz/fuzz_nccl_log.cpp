// libFuzzer target: the nccl-tests / rccl-tests log reader on any bytes. A log it cannot read
// must be an NcclLogError naming the file and line; anything else is a finding.
#include <cstddef>
#include <cstdint>
#include <sstream>
#include <string>

#include "calibration/nccl_log.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::istringstream in(std::string(reinterpret_cast<const char*>(data), size));
  try {
    fleetsim::parse_nccl_log(in, "fuzz.log");
  } catch (const fleetsim::NcclLogError&) {
  }
  return 0;
}
