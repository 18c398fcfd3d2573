// Simulated time: an integer count of nanoseconds.
//
// Integer time is exact and totally ordered, and int64 nanoseconds cover 292 years. Durations
// computed in floating point are rounded once, when they are scheduled (see from_seconds), so
// rounding never accumulates along a chain of events.
#pragma once

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
  constexpr SimTime operator*(std::int64_t times) const { return SimTime(ns_ * times); }
  constexpr SimTime& operator+=(SimTime other) {
    ns_ += other.ns_;
    return *this;
  }

 private:
  constexpr explicit SimTime(std::int64_t ns) : ns_(ns) {}
  std::int64_t ns_ = 0;
};

// Rounds up so that an activity never ends before its cost has been paid (a 0.2 ns transfer
// still takes one tick). A value within a few ulps of a whole nanosecond is that nanosecond:
// 0.6e-6 s is 600 ns, not the 601 that its binary representation would round up to.
// Negative or NaN durations clamp to 0; durations beyond SimTime's range clamp to its maximum.
inline SimTime from_seconds(double seconds) {
  if (!(seconds > 0.0)) return SimTime{};
  const double ns = seconds * 1e9;
  if (ns >= 9.2e18) return SimTime::max();
  const double nearest = std::round(ns);
  const bool noise = std::abs(ns - nearest) <= 8 * std::numeric_limits<double>::epsilon() * nearest;
  return SimTime::from_ns(static_cast<std::int64_t>(noise ? nearest : std::ceil(ns)));
}
inline SimTime from_us(double microseconds) {
  return from_seconds(microseconds * 1e-6);
}
inline SimTime from_ms(double milliseconds) {
  return from_seconds(milliseconds * 1e-3);
}

}  // namespace fleetsim
