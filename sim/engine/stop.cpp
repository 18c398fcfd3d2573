#include "sim/engine/stop.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <stop_token>

namespace fleetsim {
namespace {

std::atomic<int> requested{static_cast<int>(StopReason::none)};
static_assert(std::atomic<int>::is_always_lock_free, "request_stop runs in signal handlers");

}  // namespace

void request_stop(StopReason reason) noexcept {
  int none = static_cast<int>(StopReason::none);
  requested.compare_exchange_strong(none, static_cast<int>(reason));
}

StopReason stop_reason() noexcept {
  return static_cast<StopReason>(requested.load(std::memory_order_relaxed));
}

void clear_stop_request() noexcept {
  requested.store(static_cast<int>(StopReason::none));
}

const char* describe(StopReason reason) noexcept {
  switch (reason) {
    case StopReason::none: return "not stopped";
    case StopReason::interrupt: return "interrupted (SIGINT)";
    case StopReason::terminate: return "terminated (SIGTERM)";
    case StopReason::wall_limit: return "the wall-time limit (--max-wall) was reached";
    case StopReason::memory_limit: return "the memory limit (--max-memory) was reached";
  }
  return "stopped";
}

double resident_memory_bytes() {
  // statm: total program size, then resident set size, in pages.
  std::ifstream statm("/proc/self/statm");
  double pages = 0;
  double resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * static_cast<double>(::sysconf(_SC_PAGESIZE));
}

ResourceWatch::ResourceWatch(Limits limits, std::function<double()> memory_bytes,
                             std::chrono::milliseconds poll) {
  if (!limits.max_wall_s && !limits.max_memory_bytes) return;
  const auto start = std::chrono::steady_clock::now();
  thread_ = std::jthread(
      [limits, memory_bytes = std::move(memory_bytes), poll, start](std::stop_token stop) {
        std::mutex mutex;
        std::condition_variable_any wake;
        std::unique_lock lock(mutex);
        while (!stop.stop_requested()) {
          const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
          if (limits.max_wall_s && elapsed.count() >= *limits.max_wall_s) {
            request_stop(StopReason::wall_limit);
            return;
          }
          if (limits.max_memory_bytes && memory_bytes() > *limits.max_memory_bytes) {
            request_stop(StopReason::memory_limit);
            return;
          }
          wake.wait_for(lock, stop, poll, [] { return false; });
        }
      });
}

ResourceWatch::~ResourceWatch() = default;  // std::jthread requests its stop and joins

}  // namespace fleetsim
