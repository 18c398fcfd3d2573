#include "sim/scenario/units.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <span>

namespace fleetsim {
namespace {

// value in the base unit = number x num / den. Dividing by an exact power of ten (rather than
// multiplying by 1e-6) keeps `3.4us` the double nearest to 3.4e-6.
struct Unit {
  std::string_view suffix;
  double num = 1;
  double den = 1;
};

struct Kind {
  std::string_view what;     // "a bandwidth"
  std::string_view example;  // "400Gbps or 450GB/s"
  std::string_view forms;    // the hint: every accepted suffix
  std::span<const Unit> units;
};

constexpr double kKi = 1024.0;

constexpr std::array kBandwidthUnits = {
    Unit{"bps", 1, 8},
    Unit{"Kbps", 1e3, 8},
    Unit{"kbps", 1e3, 8},
    Unit{"Mbps", 1e6, 8},
    Unit{"Gbps", 1e9, 8},
    Unit{"Tbps", 1e12, 8},
    Unit{"b/s", 1, 8},
    Unit{"Kb/s", 1e3, 8},
    Unit{"kb/s", 1e3, 8},
    Unit{"Mb/s", 1e6, 8},
    Unit{"Gb/s", 1e9, 8},
    Unit{"Tb/s", 1e12, 8},
    Unit{"B/s", 1, 1},
    Unit{"KB/s", 1e3, 1},
    Unit{"kB/s", 1e3, 1},
    Unit{"MB/s", 1e6, 1},
    Unit{"GB/s", 1e9, 1},
    Unit{"TB/s", 1e12, 1},
    Unit{"KiB/s", kKi, 1},
    Unit{"MiB/s", kKi* kKi, 1},
    Unit{"GiB/s", kKi* kKi* kKi, 1},
    Unit{"TiB/s", kKi* kKi* kKi* kKi, 1},
};

constexpr std::array kSizeUnits = {
    Unit{"B", 1, 1},
    Unit{"KB", 1e3, 1},
    Unit{"kB", 1e3, 1},
    Unit{"MB", 1e6, 1},
    Unit{"GB", 1e9, 1},
    Unit{"TB", 1e12, 1},
    Unit{"KiB", kKi, 1},
    Unit{"MiB", kKi* kKi, 1},
    Unit{"GiB", kKi* kKi* kKi, 1},
    Unit{"TiB", kKi* kKi* kKi* kKi, 1},
};

constexpr std::array kDurationUnits = {
    Unit{"ns", 1, 1e9}, Unit{"us", 1, 1e6}, Unit{"\u00b5s", 1, 1e6}, Unit{"ms", 1, 1e3},
    Unit{"s", 1, 1},    Unit{"min", 60, 1}, Unit{"h", 3600, 1},      Unit{"d", 86400, 1},
};

constexpr std::array kHourlyPriceUnits = {
    Unit{"USD/h", 1, 1},
    Unit{"USD/hour", 1, 1},
};

constexpr std::array kFlopRateUnits = {
    Unit{"FLOPS", 1, 1},      Unit{"KFLOPS", 1e3, 1},  Unit{"MFLOPS", 1e6, 1},
    Unit{"GFLOPS", 1e9, 1},   Unit{"TFLOPS", 1e12, 1}, Unit{"PFLOPS", 1e15, 1},
    Unit{"FLOP/s", 1, 1},     Unit{"GFLOP/s", 1e9, 1}, Unit{"TFLOP/s", 1e12, 1},
    Unit{"PFLOP/s", 1e15, 1},
};

constexpr std::array kFrequencyUnits = {
    Unit{"Hz", 1, 1},
    Unit{"kHz", 1e3, 1},
    Unit{"MHz", 1e6, 1},
    Unit{"GHz", 1e9, 1},
};

const Kind kBandwidth{"a bandwidth", "400Gbps or 450GB/s",
                      "bits per second: bps, Kbps, Mbps, Gbps, Tbps (or Gb/s); bytes per second: "
                      "B/s, KB/s, MB/s, GB/s, TB/s, KiB/s, MiB/s, GiB/s, TiB/s",
                      kBandwidthUnits};
const Kind kSize{"a size", "80GB or 81559MiB",
                 "B, KB, MB, GB, TB (decimal) or KiB, MiB, GiB, TiB (binary)", kSizeUnits};
const Kind kDuration{"a duration", "0.6us or 90s", "ns, us, ms, s, min, h, d", kDurationUnits};
const Kind kHourlyPrice{"a price per hour", "2.50USD/h", "USD/h (US dollars per hour)",
                        kHourlyPriceUnits};
const Kind kFlopRate{"a FLOP rate", "989TFLOPS", "FLOPS, KFLOPS, MFLOPS, GFLOPS, TFLOPS, PFLOPS",
                     kFlopRateUnits};
const Kind kFrequency{"a frequency", "2.0GHz", "Hz, kHz, MHz, GHz", kFrequencyUnits};

std::string_view trim(std::string_view s) {
  const auto first = s.find_first_not_of(" \t");
  if (first == std::string_view::npos) {
    return {};
  }
  const auto last = s.find_last_not_of(" \t");
  return s.substr(first, last - first + 1);
}

char lower(char c) {
  return (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
}

bool equal_ignoring_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) {
    return false;
  }
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (lower(a[i]) != lower(b[i])) {
      return false;
    }
  }
  return true;
}

const Unit* find_unit(const Kind& kind, std::string_view suffix) {
  for (const Unit& unit : kind.units) {
    if (unit.suffix == suffix) {
      return &unit;
    }
  }
  return nullptr;
}

// "did you mean 400Gb/s or 400GB/s?" for a suffix that only differs in case, since the case is
// what tells bits from bytes.
std::string case_hint(const Kind& kind, std::string_view number, std::string_view suffix) {
  std::string candidates;
  for (const Unit& unit : kind.units) {
    if (!equal_ignoring_case(unit.suffix, suffix)) {
      continue;
    }
    candidates +=
        (candidates.empty() ? "" : " or ") + std::string(number) + std::string(unit.suffix);
  }
  if (candidates.empty()) {
    return std::string(kind.forms);
  }
  return "did you mean " + candidates + "? units are case-sensitive (b = bits, B = bytes); " +
         std::string(kind.forms);
}

std::string expected(const Kind& kind) {
  return "expected " + std::string(kind.what) + " like " + std::string(kind.example);
}

// The leading number of `text`; `rest` receives what follows it. An optional '+' is accepted
// because from_chars does not.
bool split_number(std::string_view text, double& number, std::string_view& rest) {
  const bool plus = !text.empty() && text.front() == '+';
  const char* begin = text.data() + (plus ? 1 : 0);
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(begin, end, number);
  if (ec != std::errc() || !std::isfinite(number)) {
    return false;
  }
  rest = std::string_view(ptr, static_cast<std::size_t>(end - ptr));
  return true;
}

double parse_quantity(std::string_view raw, const Kind& kind, Zero zero) {
  const std::string_view text = trim(raw);
  double number = 0;
  std::string_view rest;
  if (!split_number(text, number, rest)) {
    throw UnitError(expected(kind) + ", got " + in_quotes(text), std::string(kind.forms));
  }
  const std::string_view suffix = trim(rest);
  const std::string_view digits = text.substr(0, text.size() - rest.size());
  if (suffix.empty()) {
    throw UnitError(expected(kind) + ", got the bare number " + escaped(digits, 40),
                    "every quantity carries its unit: " + std::string(kind.forms));
  }
  const Unit* unit = find_unit(kind, suffix);
  if (unit == nullptr) {
    throw UnitError(
        expected(kind) + ", got unknown unit " + in_quotes(suffix) + " in " + in_quotes(text),
        case_hint(kind, digits, suffix));
  }
  const double value = number * unit->num / unit->den;
  if (!std::isfinite(value)) {
    throw UnitError(expected(kind) + ", got " + in_quotes(text) + ", too large to represent",
                    std::string(kind.forms));
  }
  if (value < 0) {
    throw UnitError("expected " + std::string(kind.what) + " >= 0, got " + in_quotes(text),
                    "a quantity cannot be negative");
  }
  if (value == 0 && zero == Zero::rejected) {
    throw UnitError("expected " + std::string(kind.what) + " > 0, got " + in_quotes(text),
                    "zero is not allowed here");
  }
  return value;
}

// Floors under which a rate is a slip of the unit, not hardware: the slowest link or store a
// GPU cluster uses moves far more than 1 MB/s (1 GbE: 125 MB/s), and a GPU or CPU computes far
// more than 1 GFLOP/s. Below them a step's transfers and kernels would outlast what integer
// nanoseconds hold (a 100 GB gradient at 1 B/s: 3,000 years).
constexpr double kSlowestBandwidth = 1e6;
constexpr double kSlowestFlopRate = 1e9;
// Ceilings above which a value is a slip of the unit: a GPU rents for a few USD an hour (a
// monthly or yearly price is not an hourly one); nothing in a GPU cluster, memory, storage or a
// message, is an exabyte.
constexpr double kDearestHourlyPrice = 1e4;
constexpr double kLargestSize = 1e18;

// `value` parsed from `text`, unless it is above zero and under `least`: then the problem
// "expected WHAT of at least LEAST, got TEXT".
double at_least(double value, double least, std::string_view text, const char* what,
                const char* least_text, const char* hint) {
  if (value > 0 && value < least) {
    throw UnitError(std::string("expected ") + what + " of at least " + least_text + ", got " +
                        in_quotes(trim(text)),
                    hint);
  }
  return value;
}

// `value` parsed from `text`, unless it is above `most`: then the problem "expected WHAT of
// at most MOST, got TEXT".
double at_most(double value, double most, std::string_view text, const char* what,
               const char* most_text, const char* hint) {
  if (value > most) {
    throw UnitError(std::string("expected ") + what + " of at most " + most_text + ", got " +
                        in_quotes(trim(text)),
                    hint);
  }
  return value;
}

}  // namespace

double parse_bandwidth(std::string_view text, Zero zero, Floor floor) {
  const double bytes_per_s = parse_quantity(text, kBandwidth, zero);
  if (floor == Floor::none) return bytes_per_s;
  return at_least(bytes_per_s, kSlowestBandwidth, text, "a bandwidth", "1MB/s (8Mbps)",
                  "links and storage in a GPU cluster move GB/s: 400Gbps, 25GB/s, 900MB/s");
}

double parse_size(std::string_view text, Zero zero) {
  return at_most(parse_quantity(text, kSize, zero), kLargestSize, text, "a size", "1000000TB",
                 "memories and messages are GB (80GB, 25MB); check the unit");
}

double parse_duration(std::string_view text, Zero zero) {
  return at_least(parse_quantity(text, kDuration, zero), 1e-9, text, "a duration", "1ns",
                  "fleetsim counts time in whole nanoseconds; write 0s for none, if zero is "
                  "allowed here");
}

double parse_flop_rate(std::string_view text, Zero zero, Floor floor) {
  const double flops = parse_quantity(text, kFlopRate, zero);
  if (floor == Floor::none) return flops;
  return at_least(flops, kSlowestFlopRate, text, "a rate", "1GFLOPS",
                  "GPUs compute hundreds of TFLOPS: 989TFLOPS, 2.25PFLOPS");
}

double parse_hourly_price(std::string_view text) {
  return at_most(parse_quantity(text, kHourlyPrice, Zero::allowed), kDearestHourlyPrice, text,
                 "a price per GPU-hour", "10000USD/h",
                 "GPUs rent for a few USD an hour: 2.95USD/h; a monthly price is not an hourly "
                 "one");
}

double parse_frequency(std::string_view text) {
  return parse_quantity(text, kFrequency, Zero::rejected);
}

std::string escaped(std::string_view text, std::size_t most) {
  std::size_t shown = std::min(text.size(), most);
  // Not inside a UTF-8 character: back to the start of the one cut.
  while (shown < text.size() && shown > 0 &&
         (static_cast<unsigned char>(text[shown]) & 0xc0) == 0x80) {
    --shown;
  }
  std::string quoted;
  for (std::size_t i = 0; i < shown; ++i) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x20 || byte == 0x7f) {
      constexpr char kHex[] = "0123456789abcdef";
      quoted += {'\\', 'x', kHex[byte >> 4], kHex[byte & 0xf]};
    } else {
      quoted += static_cast<char>(byte);
    }
  }
  if (shown < text.size()) quoted += "...";
  return quoted;
}

std::string in_quotes(std::string_view text) {
  constexpr std::size_t kShown = 200;
  return "\"" + escaped(text, kShown) + "\"";
}

}  // namespace fleetsim
