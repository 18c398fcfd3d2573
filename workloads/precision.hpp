// Bytes per element of the number formats a training step stores and moves.
#pragma once

namespace fleetsim {

inline constexpr double kBf16Bytes = 2;
inline constexpr double kFp8Bytes = 1;
inline constexpr double kFp32Bytes = 4;

}  // namespace fleetsim
