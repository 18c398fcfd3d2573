#include "sim/report/console_text.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "sim/engine/text.hpp"

namespace fleetsim::console {

std::string fixed(double value, int decimals) {
  return fixed_decimals(value, decimals);
}

std::string significant(double value, int digits) {
  char buffer[64];
  const auto result =
      std::to_chars(buffer, buffer + sizeof buffer, value, std::chars_format::general, digits);
  return std::string(buffer, result.ptr);
}

std::string seconds_text(double seconds) {
  if (seconds == 0.0 || std::abs(seconds) >= 0.01) {
    return fixed(seconds, 3);
  }
  return significant(seconds, 3);
}

std::string grouped_integer(double value) {
  // Beyond a long long (and inf, nan): significant digits, not an overflowed integer.
  if (!(std::abs(value) < 9e18)) return significant(value, 4);
  const long long rounded = std::llround(value);
  const std::string digits = std::to_string(rounded < 0 ? -rounded : rounded);
  std::string text;
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) {
      text += ',';
    }
    text += digits[i];
  }
  return rounded < 0 ? "-" + text : text;
}

std::string gb_text(double bytes) {
  return fixed(bytes / kBytesPerGB, 2);
}
std::string percent_text(double fraction) {
  return fixed(100.0 * fraction, 1);
}

std::size_t display_width(const std::string& text) {
  return static_cast<std::size_t>(
      std::count_if(text.begin(), text.end(), [](char c) { return (c & 0xC0) != 0x80; }));
}

std::string pad_left(const std::string& text, std::size_t width) {
  const std::size_t shown = display_width(text);
  return shown >= width ? text : std::string(width - shown, ' ') + text;
}

std::string pad_right(const std::string& text, std::size_t width) {
  const std::size_t shown = display_width(text);
  return shown >= width ? text : text + std::string(width - shown, ' ');
}

Table::Table(std::vector<std::string> header) {
  rows_.push_back({"", std::move(header)});
}

void Table::add(std::string label, std::vector<std::string> cells) {
  rows_.push_back({std::move(label), std::move(cells)});
}

std::string Table::render() const {
  std::vector<std::size_t> widths(1, 0);
  for (const Row& row : rows_) {
    widths.resize(std::max(widths.size(), row.cells.size() + 1), 0);
    widths[0] = std::max(widths[0], display_width(row.label));
    for (std::size_t column = 0; column < row.cells.size(); ++column) {
      widths[column + 1] = std::max(widths[column + 1], display_width(row.cells[column]));
    }
  }
  std::string text;
  for (const Row& row : rows_) {
    std::string line = pad_right(row.label, widths[0]);
    for (std::size_t column = 0; column < row.cells.size(); ++column) {
      line += "  " + pad_left(row.cells[column], widths[column + 1]);
    }
    text += line + "\n";
  }
  return text;
}

std::string aligned_rows(const std::vector<std::vector<std::string>>& rows) {
  std::vector<std::size_t> widths;
  for (const auto& row : rows) {
    widths.resize(std::max(widths.size(), row.size()));
    for (std::size_t c = 0; c < row.size(); ++c) {
      widths[c] = std::max(widths[c], display_width(row[c]));
    }
  }
  std::string text;
  for (const auto& row : rows) {
    text += "  " + pad_right(row[0], widths[0]);
    for (std::size_t c = 1; c < row.size(); ++c) text += "  " + pad_left(row[c], widths[c]);
    text += "\n";
  }
  return text;
}

}  // namespace fleetsim::console
