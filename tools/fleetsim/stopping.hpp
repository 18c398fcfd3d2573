// Stopping early from the command line: Ctrl-C and SIGTERM, --max-wall and --max-memory, and
// what a report says about the work a stop left undone.
#pragma once

#include <string>
#include <vector>

#include "sim/engine/stop.hpp"
#include "sim/report/report.hpp"

namespace fleetsim {

// --max-wall DURATION (90s, 30min, 2h) and --max-memory SIZE (8GB, 512MiB), either may be
// empty; throws boost::program_options::error on a value that does not parse.
ResourceWatch::Limits parse_limits(const std::string& max_wall, const std::string& max_memory);

// SIGINT and SIGTERM request a stop instead of ending the process; a second one ends it at once
// (the handler resets both as it runs).
void stop_on_signals();
// Back to the ordinary: SIGINT and SIGTERM end the process (once its results are decided: the
// files are written atomically, so nothing half-written is left).
void stop_ending_process_on_signals();

// The exit status of a command that a stop ended: 128 + the signal as shells report it, and
// kStoppedAtLimit for the limits.
constexpr int kStoppedAtLimit = 3;
int exit_code(StopReason reason);

// `report` marked partial, stopped for `reason` (kept if it is already): its partial results.
PartialResults& mark_partial(RunReport& report, StopReason reason);
// Marks `report` partial after a stop: keeps the variants finished (`finished[i]`), the others
// going to its not_finished, and lists the Monte Carlos cut short.
void keep_finished(RunReport& report, const std::vector<char>& finished, StopReason reason);

}  // namespace fleetsim
