// How the console writes numbers: whatever their size, digits and nothing else.
#include <catch2/catch.hpp>

#include <limits>
#include <string>

#include "sim/engine/text.hpp"
#include "sim/report/console_text.hpp"

using namespace fleetsim;

TEST_CASE("fixed decimals hold any double, and huge integers read as significant digits") {
  // A double's largest finite value has 309 digits before the point: all of them, two
  // decimals after (a buffer sized for everyday numbers once printed stray bytes here).
  const std::string largest = fixed_decimals(std::numeric_limits<double>::max(), 2);
  CHECK(largest.size() == 309 + 3);
  CHECK(largest.find_first_not_of("0123456789.") == std::string::npos);
  CHECK(std::stod(console::fixed(1e65, 3)) == 1e65);
  CHECK(console::fixed(-1.5, 1) == "-1.5");
  CHECK(fixed_decimals(std::numeric_limits<double>::infinity(), 2) == "inf");
  // Past a long long an integer is not rounded into one (which overflowed to "-0").
  CHECK(console::grouped_integer(1234567.8) == "1,234,568");
  CHECK(console::grouped_integer(-1234.4) == "-1,234");
  CHECK(console::grouped_integer(1e19) == "1e+19");
  CHECK(console::grouped_integer(std::numeric_limits<double>::infinity()) == "inf");
}
