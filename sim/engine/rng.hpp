// Named, seeded random streams.
//
// Every stochastic process draws from its own stream, seeded from (run seed, purpose, entity),
// so adding a new random process never shifts the draws of an existing one, and results do not
// depend on the order in which streams are created. The generator is xoshiro256** (Blackman &
// Vigna 2018), seeded through SplitMix64; distributions are computed here rather than with
// <random>'s, whose output differs between standard library implementations.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace fleetsim {

class RngStream {
 public:
  RngStream(std::uint64_t seed, std::string_view purpose, std::uint64_t entity = 0);

  std::uint64_t next_u64();
  // Uniform in [0, 1), 53 random bits.
  double uniform01();
  // Exponential with the given rate (events per unit); precondition: rate > 0.
  double exponential(double rate);
  // Standard normal (Box-Muller, both values used in turn).
  double normal();

 private:
  std::array<std::uint64_t, 4> state_{};
  double spare_normal_ = 0.0;
  bool has_spare_normal_ = false;
};

// Stable 64-bit hash of a string (FNV-1a), used to turn stream purposes into seeds.
std::uint64_t stable_hash(std::string_view text);

// "fnv1a64 <16 hex digits>" of some bytes: how a profile's provenance names an input file.
std::string fingerprint(std::string_view bytes);

}  // namespace fleetsim
