#include "sim/engine/stop.hpp"

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <stop_token>
#include <string>
#include <vector>

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

double cgroup_memory_cap_bytes(const std::string& cgroups, const std::filesystem::path& mount) {
  std::vector<std::filesystem::path> caps{mount / "memory.max",
                                          mount / "memory/memory.limit_in_bytes"};
  const auto with_groups_above = [&caps](std::filesystem::path root, const std::string& path,
                                         const char* file) {
    std::filesystem::path group = root / std::filesystem::path(path).relative_path();
    for (int depth = 0; depth < 64 && group != root && group.has_relative_path(); ++depth) {
      caps.push_back(group / file);
      group = group.parent_path();
    }
  };
  std::istringstream groups(cgroups);
  for (std::string line; std::getline(groups, line);) {
    const auto first = line.find(':');
    const auto second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (controllers.empty()) with_groups_above(mount, path, "memory.max");
    if (("," + controllers + ",").find(",memory,") != std::string::npos) {
      with_groups_above(mount / "memory", path, "memory.limit_in_bytes");
    }
  }
  double least = 0;
  for (const std::filesystem::path& cap : caps) {
    std::ifstream in(cap);
    double bytes = 0;
    if (in >> bytes && bytes > 0 && bytes < 0x1p60 && (least == 0 || bytes < least)) {
      least = bytes;
    }
  }
  return least;
}

double usable_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  const double machine =
      pages > 0 && page > 0 ? static_cast<double>(pages) * static_cast<double>(page) : 0;
  std::ifstream in("/proc/self/cgroup");
  std::stringstream cgroups;
  cgroups << in.rdbuf();
  const double cap = cgroup_memory_cap_bytes(cgroups.str(), "/sys/fs/cgroup");
  return cap > 0 && (machine == 0 || cap < machine) ? cap : machine;
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
