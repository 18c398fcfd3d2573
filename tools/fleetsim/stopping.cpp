#include "tools/fleetsim/stopping.hpp"

#include <unistd.h>

#include <boost/program_options/errors.hpp>
#include <csignal>

#include "sim/report/report.hpp"
#include "sim/scenario/units.hpp"

namespace fleetsim {
namespace {

// Ends the process as the signal would, but first removes the temporary file of a result being
// written (the target keeps its previous content). Every call here is async-signal-safe.
extern "C" void on_ending_signal(int signal) {
  if (const char* temp = temp_file_being_written()) ::unlink(temp);
  std::signal(signal, SIG_DFL);
  std::raise(signal);
}

}  // namespace

void stop_ending_process_on_signals() {
  // Async-signal-safe (sigaction is), for the handler's use.
  struct sigaction action = {};
  action.sa_handler = on_ending_signal;
  sigemptyset(&action.sa_mask);
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

namespace {

extern "C" void on_signal(int signal) {
  request_stop(signal == SIGINT ? StopReason::interrupt : StopReason::terminate);
  // The next SIGINT or SIGTERM ends the process the ordinary way, for a user who will not wait
  // for the results to be written.
  stop_ending_process_on_signals();
}

}  // namespace

ResourceWatch::Limits parse_limits(const std::string& max_wall, const std::string& max_memory) {
  ResourceWatch::Limits limits;
  try {
    if (!max_wall.empty()) {
      limits.max_wall_s = parse_duration(max_wall);
      if (*limits.max_wall_s <= 0) throw UnitError("--max-wall must be above zero", "e.g. 2h");
    }
    if (!max_memory.empty()) limits.max_memory_bytes = parse_size(max_memory);
  } catch (const UnitError& error) {
    throw boost::program_options::error(std::string(error.what()) + " (" + error.hint() + ")");
  }
  if (limits.max_memory_bytes && resident_memory_bytes() <= 0) {
    throw boost::program_options::error(
        "--max-memory needs the process's resident memory, and /proc/self/statm cannot be read "
        "here");
  }
  return limits;
}

void stop_on_signals() {
  struct sigaction action = {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  sigaddset(&action.sa_mask, SIGINT);
  sigaddset(&action.sa_mask, SIGTERM);
  // Restarted, a write to a pipe that the signal interrupts does not fail the output.
  action.sa_flags = SA_RESTART;
  sigaction(SIGINT, &action, nullptr);
  sigaction(SIGTERM, &action, nullptr);
}

int exit_code(StopReason reason) {
  switch (reason) {
    case StopReason::interrupt: return 128 + SIGINT;
    case StopReason::terminate: return 128 + SIGTERM;
    case StopReason::none: return 0;
    case StopReason::wall_limit:
    case StopReason::memory_limit: break;
  }
  return kStoppedAtLimit;
}

}  // namespace fleetsim
