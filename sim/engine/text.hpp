// Text helpers every layer uses: one home for how names compare and how a number is written
// with fixed decimals.
#pragma once

#include <array>
#include <charconv>
#include <string>
#include <string_view>
#include <system_error>

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

// `value` with `decimals` decimals (0 to 17), whatever the C locale (std::to_chars, unlike
// printf, ignores it: never "1,5" for 1.5); "inf" and "nan" as such. Room for every finite
// double: 309 digits before the point, a sign, the point and the decimals.
inline std::string fixed_decimals(double value, int decimals) {
  std::array<char, 330> text;
  const std::to_chars_result end = std::to_chars(text.data(), text.data() + text.size(), value,
                                                 std::chars_format::fixed, decimals);
  if (end.ec != std::errc{}) return "?";  // more decimals than the room: a caller's mistake
  return std::string(text.data(), end.ptr);
}

}  // namespace fleetsim
