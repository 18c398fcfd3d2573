// Text helpers every layer uses: one home for how names compare.
#pragma once

#include <string>
#include <string_view>

namespace fleetsim {

// `text` with A-Z in lower case and every other byte as it is (names, units and suffixes
// compare case-blind, whatever the C locale).
inline std::string ascii_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return lower;
}

}  // namespace fleetsim
