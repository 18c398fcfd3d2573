// Clears the process-wide stop request (sim/engine/stop.hpp) when it goes, however a test ends:
// a failed check must not leave the next test in the same process stopped.
#pragma once

#include "sim/engine/stop.hpp"

namespace fleetsim::testing {

struct StopGuard {
  StopGuard() = default;
  StopGuard(const StopGuard&) = delete;
  StopGuard& operator=(const StopGuard&) = delete;
  ~StopGuard() { clear_stop_request(); }
};

}  // namespace fleetsim::testing
