// libFuzzer target: the unit parsers on any text. A value that does not parse must be a
// UnitError; any other exception, a crash or undefined behaviour is a finding.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "sim/scenario/units.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  using Parser = double (*)(std::string_view);
  for (const Parser parse :
       {static_cast<Parser>([](std::string_view t) { return fleetsim::parse_bandwidth(t); }),
        static_cast<Parser>([](std::string_view t) { return fleetsim::parse_size(t); }),
        static_cast<Parser>([](std::string_view t) { return fleetsim::parse_duration(t); }),
        static_cast<Parser>(fleetsim::parse_hourly_price),
        static_cast<Parser>([](std::string_view t) { return fleetsim::parse_flop_rate(t); }),
        static_cast<Parser>(fleetsim::parse_frequency)}) {
    try {
      parse(text);
    } catch (const fleetsim::UnitError&) {
    }
  }
  return 0;
}
