// Stopping early from the command line: Ctrl-C and SIGTERM, --max-wall and --max-memory, and
// the exit status of a command a stop ended. What a report says about the work a stop left
// undone is the study's (sim/study/study.hpp).
#pragma once

#include <string>
#include <vector>

#include "sim/engine/stop.hpp"

namespace fleetsim {

// --max-wall DURATION (90s, 30min, 2h) and --max-memory SIZE (8GB, 512MiB), either may be
// empty; throws boost::program_options::error on a value that does not parse.
ResourceWatch::Limits parse_limits(const std::string& max_wall, const std::string& max_memory);

// SIGINT and SIGTERM request a stop instead of ending the process; a second one ends it at once
// (the handler resets both as it runs).
void stop_on_signals();
// Back to the ordinary: SIGINT and SIGTERM end the process (once its results are decided: the
// files are written atomically, and the temporary file of one being written is removed, so
// nothing half-written is left).
void stop_ending_process_on_signals();

// The exit status of a command that a stop ended: 128 + the signal as shells report it, and
// kStoppedAtLimit for the limits.
constexpr int kStoppedAtLimit = 3;
int exit_code(StopReason reason);

}  // namespace fleetsim
