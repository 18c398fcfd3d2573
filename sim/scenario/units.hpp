// Quantities written with their unit, as scenario and preset files spell them.
//
// Every physical number in a YAML file carries its unit (`400Gbps`, `80GB`, `0.6us`,
// `989TFLOPS`); a bare number is an error, because a silently assumed unit is how a simulator
// ends up a factor of 8 or 1000 off. Prefixes K, M, G, T, P are decimal (G = 1e9); Ki, Mi, Gi, Ti
// are binary (Gi = 2^30). In bandwidths `b` means bits and `B` bytes, case-sensitively.
//
// The parsers know nothing about files: they throw UnitError with a problem and a hint, and the
// scenario loader adds the file, line, column and key.
#pragma once

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace fleetsim {

class UnitError : public std::runtime_error {
 public:
  // what() is the problem ("expected a bandwidth like 400Gbps or 450GB/s, got \"fast\"").
  UnitError(const std::string& problem, std::string hint)
      : std::runtime_error(problem), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }

 private:
  std::string hint_;
};

// Whether zero is a valid value. Negative values are always rejected: no quantity read from a
// scenario (a rate, a size, a latency, an uncertainty) can be negative.
enum class Zero { rejected, allowed };

// Whether a rate above zero must reach what the slowest hardware does (1 MB/s, 1 GFLOP/s): a
// rate below it is a slipped unit. An uncertainty in the same unit has no floor.
enum class Floor { hardware, none };

// `400Gbps`, `400Gb/s`, `450GB/s`, `3.35TB/s`, `900MB/s`, `25GiB/s` -> bytes per second.
double parse_bandwidth(std::string_view text, Zero zero = Zero::rejected,
                       Floor floor = Floor::hardware);

// `80GB`, `81559MiB`, `25MB`, `1.5TB`, `512KiB`, `100B` -> bytes; at most 1,000,000 TB (an
// exabyte: a slipped unit past it).
double parse_size(std::string_view text, Zero zero = Zero::rejected);

// `90s`, `3.4us`, `5ms`, `2ns`, `10min`, `2h`, `30d` -> seconds. Simulated time counts whole
// nanoseconds (sim/engine/time.hpp): a duration above zero and under 1ns is refused, not
// rounded to a tick it does not mean.
double parse_duration(std::string_view text, Zero zero = Zero::allowed);

// `2.50USD/h` -> US dollars per hour, at most 10,000 (a monthly price is not an hourly one).
// Zero is allowed (hardware already paid for).
double parse_hourly_price(std::string_view text);

// `989TFLOPS`, `2.25PFLOPS`, `500GFLOPS` (or `TFLOP/s`) -> floating-point operations per second.
double parse_flop_rate(std::string_view text, Zero zero = Zero::rejected,
                       Floor floor = Floor::hardware);

// `2.0GHz`, `3300MHz` -> cycles per second.
double parse_frequency(std::string_view text);

// `text` as a message may show it: control bytes (a NUL, a newline, an escape) written as
// \xNN, and past `most` bytes cut (before a UTF-8 character, not inside one) and ended "...".
std::string escaped(std::string_view text, std::size_t most = std::string_view::npos);
// `text` escaped, cut after 200 bytes and between double quotes, as an error message quotes a
// value: never a whole foreign file.
std::string in_quotes(std::string_view text);

}  // namespace fleetsim
