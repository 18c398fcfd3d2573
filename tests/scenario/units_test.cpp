// Unit strings: each expected value is the number times the prefix (decimal K/M/G/T/P = 1e3..1e15,
// binary Ki/Mi/Gi/Ti = 2^10..2^40), divided by 8 when the unit counts bits.
#include <catch2/catch.hpp>

#include "sim/scenario/units.hpp"

namespace fleetsim {
namespace {

// The hint of the UnitError that `parse` throws, or "no error".
template <typename Parse>
std::string hint_of(Parse parse) {
  try {
    parse();
  } catch (const UnitError& e) {
    return e.hint();
  }
  return "no error";
}

template <typename Parse>
std::string problem_of(Parse parse) {
  try {
    parse();
  } catch (const UnitError& e) {
    return e.what();
  }
  return "no error";
}

TEST_CASE("bandwidths in bits per second divide by 8") {
  CHECK(parse_bandwidth("400Gbps") == Approx(50e9));  // 400e9 bits / 8
  CHECK(parse_bandwidth("400Gb/s") == Approx(50e9));
  CHECK(parse_bandwidth("100Mbps") == Approx(12.5e6));
  CHECK(parse_bandwidth("1Tbps") == Approx(125e9));
}

TEST_CASE("bandwidths in bytes per second use decimal or binary prefixes") {
  CHECK(parse_bandwidth("450GB/s") == Approx(450e9));
  CHECK(parse_bandwidth("3.35TB/s") == Approx(3.35e12));
  CHECK(parse_bandwidth("64GB/s") == Approx(64e9));
  CHECK(parse_bandwidth("900MB/s") == Approx(900e6));
  CHECK(parse_bandwidth("2GiB/s") == Approx(2.0 * 1024 * 1024 * 1024));
  CHECK(parse_bandwidth(" 450 GB/s ") == Approx(450e9));
}

TEST_CASE("a bandwidth must be positive unless zero is allowed") {
  CHECK_THROWS_AS(parse_bandwidth("-400Gbps"), UnitError);
  CHECK_THAT(problem_of([] { parse_bandwidth("-400Gbps"); }),
             Catch::Contains("expected a bandwidth >= 0"));
  CHECK_THAT(problem_of([] { parse_bandwidth("0Gbps"); }),
             Catch::Contains("expected a bandwidth > 0"));
  CHECK(parse_bandwidth("0TB/s", Zero::allowed) == 0);
}

TEST_CASE("bandwidth units are case-sensitive, b for bits and B for bytes") {
  CHECK_THAT(problem_of([] { parse_bandwidth("400gbps"); }), Catch::Contains("unknown unit"));
  CHECK_THAT(hint_of([] { parse_bandwidth("400gbps"); }), Catch::Contains("did you mean 400Gbps"));
  // Both readings of gb/s exist, so the hint offers both.
  CHECK_THAT(hint_of([] { parse_bandwidth("400gb/s"); }), Catch::Contains("400Gb/s or 400GB/s"));
}

TEST_CASE("text that is not a bandwidth names what was expected and what was found") {
  CHECK(problem_of([] { parse_bandwidth("fast"); }) ==
        "expected a bandwidth like 400Gbps or 450GB/s, got \"fast\"");
  CHECK_THAT(hint_of([] { parse_bandwidth("fast"); }), Catch::Contains("Gbps"));
  CHECK_THROWS_AS(parse_bandwidth(""), UnitError);
  CHECK_THROWS_AS(parse_bandwidth("400 furlongs"), UnitError);
}

TEST_CASE("a bare number is an error whose hint shows the unit forms") {
  CHECK_THAT(problem_of([] { parse_bandwidth("400"); }), Catch::Contains("bare number 400"));
  CHECK_THAT(hint_of([] { parse_bandwidth("400"); }), Catch::Contains("Gbps"));
  CHECK_THAT(hint_of([] { parse_bandwidth("400"); }), Catch::Contains("GB/s"));
  CHECK_THAT(hint_of([] { parse_size("80"); }), Catch::Contains("GiB"));
  CHECK_THAT(hint_of([] { parse_duration("90"); }), Catch::Contains("us"));
  CHECK_THAT(hint_of([] { parse_flop_rate("989"); }), Catch::Contains("TFLOPS"));
}

TEST_CASE("sizes: decimal GB/MB/KB/TB, binary GiB/MiB/KiB/TiB") {
  CHECK(parse_size("80GB") == Approx(80e9));
  CHECK(parse_size("81559MiB") == Approx(81559.0 * 1024 * 1024));  // 85,520,809,984 bytes
  CHECK(parse_size("25MB") == Approx(25e6));
  CHECK(parse_size("1.5TB") == Approx(1.5e12));
  CHECK(parse_size("512KiB") == Approx(512.0 * 1024));
  CHECK(parse_size("100B") == 100);
  CHECK(parse_size("1TiB") == Approx(1099511627776.0));
  CHECK_THROWS_AS(parse_size("0GB"), UnitError);
  CHECK(parse_size("0MiB", Zero::allowed) == 0);
  CHECK_THROWS_AS(parse_size("80Gb"), UnitError);  // bits are not a size
}

TEST_CASE("durations convert to seconds and may be zero") {
  CHECK(parse_duration("90s") == Approx(90));
  CHECK(parse_duration("3.4us") == Approx(3.4e-6));
  CHECK(parse_duration("0.6us") == Approx(0.6e-6));
  CHECK(parse_duration("5ms") == Approx(5e-3));
  CHECK(parse_duration("2ns") == Approx(2e-9));
  CHECK(parse_duration("10min") == Approx(600));
  CHECK(parse_duration("2h") == Approx(7200));
  CHECK(parse_duration("0us") == 0);
  CHECK_THROWS_AS(parse_duration("-1us"), UnitError);
  CHECK_THROWS_AS(parse_duration("3 fortnights"), UnitError);
}

TEST_CASE("a duration above zero and under the clock's 1 ns tick is refused, not rounded") {
  CHECK(parse_duration("1ns") == Approx(1e-9));
  CHECK(parse_duration("0ns") == 0);
  const auto tiny = [] { parse_duration("0.1ns"); };
  CHECK_THROWS_AS(tiny(), UnitError);
  CHECK_THAT(problem_of(tiny), Catch::Contains("at least 1ns"));
  CHECK_THROWS_AS(parse_duration("0s", Zero::rejected), UnitError);
}

TEST_CASE("a rate under what any cluster's links or GPUs do is a slip of the unit, refused") {
  CHECK(parse_bandwidth("1MB/s") == Approx(1e6));
  CHECK(parse_bandwidth("8Mbps") == Approx(1e6));
  CHECK(parse_bandwidth("0GB/s", Zero::allowed) == 0);
  const auto slow = [] { parse_bandwidth("0.001Gbps"); };  // 125 KB/s
  CHECK_THROWS_AS(slow(), UnitError);
  CHECK_THAT(problem_of(slow), Catch::Contains("at least 1MB/s"));
  CHECK(parse_flop_rate("1GFLOPS") == Approx(1e9));
  const auto weak = [] { parse_flop_rate("1e-12TFLOPS"); };
  CHECK_THROWS_AS(weak(), UnitError);
  CHECK_THAT(problem_of(weak), Catch::Contains("at least 1GFLOPS"));
}

TEST_CASE("a value quoted in a message shows its control bytes and is cut when long") {
  CHECK(in_quotes("dgx-h100") == "\"dgx-h100\"");
  // A NUL would end the message where C strings are read; a newline would split its line.
  CHECK(in_quotes(std::string("a\0b\nc", 5)) == "\"a\\x00b\\x0ac\"");
  const std::string foreign(1000, 'x');
  CHECK(in_quotes(foreign) == "\"" + std::string(200, 'x') + "...\"");
  CHECK(escaped(foreign) == foreign);  // no limit unless given
  // Cut before a UTF-8 character, not inside it: 59 x and a two-byte micro sign.
  const std::string micro = std::string(59, 'x') + "\u00b5s and more";
  CHECK(escaped(micro, 60) == std::string(59, 'x') + "...");
}

TEST_CASE("FLOP rates") {
  CHECK(parse_flop_rate("989TFLOPS") == Approx(989e12));
  CHECK(parse_flop_rate("2.25PFLOPS") == Approx(2.25e15));
  CHECK(parse_flop_rate("500GFLOPS") == Approx(500e9));
  CHECK(parse_flop_rate("989TFLOP/s") == Approx(989e12));
  CHECK_THROWS_AS(parse_flop_rate("0TFLOPS"), UnitError);  // only a sigma may be zero
  CHECK(parse_flop_rate("0TFLOPS", Zero::allowed) == 0);
  CHECK_THAT(hint_of([] { parse_flop_rate("989tflops"); }),
             Catch::Contains("did you mean 989TFLOPS"));
}

TEST_CASE("scientific notation and an explicit plus sign are numbers") {
  CHECK(parse_bandwidth("4e2Gbps") == Approx(50e9));
  CHECK(parse_duration("+5ms") == Approx(5e-3));
}

}  // namespace
}  // namespace fleetsim
