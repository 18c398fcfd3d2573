// Simulated time: an integer count of nanoseconds.
//
// Integer time is exact and totally ordered, and int64 nanoseconds cover 292 years. Durations
// computed in floating point are rounded once, when they are scheduled (see from_seconds), so
// rounding never accumulates along a chain of events.
#pragma once

#include <algorithm>
#include <cmath>
#include <compare>
#include <cstdint>
#include <limits>

namespace fleetsim {

class SimTime {
 public:
  constexpr SimTime() = default;
  static constexpr SimTime from_ns(std::int64_t ns) { return SimTime(ns); }
  static constexpr SimTime max() { return SimTime(std::numeric_limits<std::int64_t>::max()); }

  constexpr std::int64_t ns() const { return ns_; }
  constexpr double seconds() const { return static_cast<double>(ns_) * 1e-9; }

  constexpr auto operator<=>(const SimTime&) const = default;
  constexpr SimTime operator+(SimTime other) const { return SimTime(ns_ + other.ns_); }
  constexpr SimTime operator-(SimTime other) const { return SimTime(ns_ - other.ns_); }
  constexpr SimTime& operator+=(SimTime other) {
    ns_ += other.ns_;
    return *this;
  }

 private:
  constexpr explicit SimTime(std::int64_t ns) : ns_(ns) {}
  std::int64_t ns_ = 0;
};

// Rounds up so that an activity never ends before its cost has been paid (a 0.2 ns transfer
// still takes one tick), except that a value within floating-point noise of a whole nanosecond
// is that nanosecond: 0.6e-6 s is 600 ns, not 601. Negative or NaN durations clamp to 0.
inline SimTime from_seconds(double seconds) {
  if (!(seconds > 0.0))
    return SimTime{};
  const double ns = seconds * 1e9;
  const double nearest = std::round(ns);
  const bool whole = std::abs(ns - nearest) <= 1e-9 * std::max(1.0, nearest);
  return SimTime::from_ns(
      static_cast<std::int64_t>(whole && nearest > 0 ? nearest : std::ceil(ns)));
}
inline SimTime from_us(double microseconds) {
  return from_seconds(microseconds * 1e-6);
}
inline SimTime from_ms(double milliseconds) {
  return from_seconds(milliseconds * 1e-3);
}
inline double to_seconds(SimTime t) {
  return t.seconds();
}

}  // namespace fleetsim
