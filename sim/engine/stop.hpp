// Stopping a long simulation early: Ctrl-C, a wall-time limit, a memory limit.
//
// A signal reaches the whole process, so the request to stop is process-wide too: one atomic
// that a signal handler may set. The long loops poll it (the event loop every few thousand
// events, a Monte Carlo before each replication, a sweep before each point) and unwind with
// Stopped; the command line then reports what finished, marked partial.
#pragma once

#include <chrono>
#include <exception>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <thread>

namespace fleetsim {

enum class StopReason : int {
  none = 0,
  interrupt,     // SIGINT (Ctrl-C)
  terminate,     // SIGTERM (a batch system's cancel, mpirun passing on a Ctrl-C)
  wall_limit,    // --max-wall
  memory_limit,  // --max-memory
};

// Async-signal-safe (one lock-free atomic compare-and-swap). The first reason is kept.
void request_stop(StopReason reason) noexcept;
StopReason stop_reason() noexcept;
inline bool stop_requested() noexcept {
  return stop_reason() != StopReason::none;
}
// For a process that carries on after a stop (tests).
void clear_stop_request() noexcept;
// "interrupted (SIGINT)", "the wall-time limit", ...
const char* describe(StopReason reason) noexcept;

// Thrown where a poll finds a stop requested. Deliberately not a ModelError: code that carries
// on past a simulation that fails (a sweep point, a sensitivity draw) must not carry on past a
// stop.
class Stopped : public std::exception {
 public:
  explicit Stopped(StopReason reason = stop_reason()) : reason_(reason) {}
  StopReason reason() const { return reason_; }
  const char* what() const noexcept override { return describe(reason_); }

 private:
  StopReason reason_;
};
inline void throw_if_stop_requested() {
  if (stop_requested()) throw Stopped();
}

// The process's resident memory (Linux: /proc/self/statm), 0 where it cannot be read.
double resident_memory_bytes();
// The memory this process may hold at most: the machine's, or its container's (cgroup) cap
// where lower; 0 where neither can be read.
double usable_memory_bytes();
// The least memory cap of the control groups `cgroups` (as /proc/self/cgroup lists them:
// "0::PATH", "N:memory:PATH") place a process in, under `mount` (/sys/fs/cgroup): cgroup v2's
// memory.max, v1's memory.limit_in_bytes, of its group, each group above it and the mount's
// root (a container's own namespace). "max", a number of 2^60 or more, or a file not there: no
// cap. 0 where there is none.
double cgroup_memory_cap_bytes(const std::string& cgroups, const std::filesystem::path& mount);

// Watches the limits from a thread of its own while it lives, and requests a stop when one is
// passed: the wall time since construction, or the resident memory (checked every `poll`; the
// process can outgrow the limit by what it allocates before the next poll of the stop, in the
// event loop or between simulations). Here beside the stop it requests, so that tests can drive
// it with a made-up memory reading; the command line starts one, and a fuzz target bounds each
// input's simulation with one.
class ResourceWatch {
 public:
  struct Limits {
    std::optional<double> max_wall_s;
    std::optional<double> max_memory_bytes;
  };
  explicit ResourceWatch(Limits limits,
                         std::function<double()> memory_bytes = resident_memory_bytes,
                         std::chrono::milliseconds poll = std::chrono::milliseconds(10));
  ResourceWatch(const ResourceWatch&) = delete;
  ResourceWatch& operator=(const ResourceWatch&) = delete;
  ~ResourceWatch();  // stops the thread

 private:
  std::jthread thread_;
};

}  // namespace fleetsim
