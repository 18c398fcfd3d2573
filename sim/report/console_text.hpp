// Text for the console's tables: how numbers read (locale-free, grouped, in GB, percent) and
// tables whose columns line up. Widths are measured in displayed characters (UTF-8 code
// points) because the tables use "—" for missing values. Used by the console renderings of
// this folder (console.cpp, console_analysis.cpp) and by the generated accuracy page
// (tools/accuracy).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace fleetsim::console {

inline constexpr const char* kMissing = "—";
inline constexpr double kBytesPerGB = 1e9;  // decimal GB, as HBM capacities are quoted
inline constexpr double kDay = 86400;       // seconds

// Fixed decimals or significant digits; std::to_chars, unlike printf, ignores the process
// locale: a table never shows "1,5" for 1.5.
std::string fixed(double value, int decimals);
std::string significant(double value, int digits);
// Milliseconds matter in a step breakdown, so values under 0.01 keep three significant digits
// instead of rounding to 0.000.
std::string seconds_text(double seconds);
// 1234567.8 -> "1,234,568"
std::string grouped_integer(double value);
std::string gb_text(double bytes);          // 2 decimals
std::string percent_text(double fraction);  // 1 decimal, no sign

std::size_t display_width(const std::string& text);
std::string pad_left(const std::string& text, std::size_t width);
std::string pad_right(const std::string& text, std::size_t width);

// A label column followed by right-aligned value columns; widths fit the content.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void add(std::string label, std::vector<std::string> cells);
  std::string render() const;

 private:
  struct Row {
    std::string label;
    std::vector<std::string> cells;
  };
  std::vector<Row> rows_;
};

// A table's rows indented by two spaces, the first column left-aligned, the others
// right-aligned, two spaces apart.
std::string aligned_rows(const std::vector<std::vector<std::string>>& rows);

}  // namespace fleetsim::console
