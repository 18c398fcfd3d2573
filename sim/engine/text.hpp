// Text helpers every layer uses: one home for how names compare.
#pragma once

#include <cctype>
#include <string>
#include <string_view>

namespace fleetsim {

// `text` in ASCII lower case (names, units and suffixes compare case-blind; no locale).
inline std::string ascii_lower(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return lower;
}

}  // namespace fleetsim
