#include "sim/engine/stop.hpp"

#include <unistd.h>

#include <atomic>
#include <catch2/catch.hpp>
#include <chrono>
#include <thread>
#include <vector>

#include "common/stop_guard.hpp"
#include "common/temp_dir.hpp"
#include "sim/engine/engine.hpp"

using namespace fleetsim;

namespace {

// Waits (up to a minute, for a loaded machine) until a stop is requested.
StopReason wait_for_stop() {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::minutes(1);
  while (!stop_requested() && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return stop_reason();
}

// A chain of 20,000 events, each scheduling the next; optionally a stop is requested by the
// 5,000th.
struct EventChain {
  Engine engine;
  std::vector<int> ran;
  bool stop_midway = false;

  explicit EventChain(bool stop) : stop_midway(stop) {
    engine.schedule_at(SimTime::from_ns(0), [this] { step(1); });
  }
  void step(int i) {
    ran.push_back(i);
    if (stop_midway && i == 5000) request_stop(StopReason::interrupt);
    if (i < 20000) engine.schedule_after(SimTime::from_ns(3), [this, i] { step(i + 1); });
  }
};

}  // namespace

TEST_CASE("stop: the first reason is kept until cleared") {
  const fleetsim::testing::StopGuard guard;
  CHECK_FALSE(stop_requested());
  request_stop(StopReason::wall_limit);
  request_stop(StopReason::interrupt);
  CHECK(stop_reason() == StopReason::wall_limit);
  CHECK_THROWS_AS(throw_if_stop_requested(), Stopped);
  clear_stop_request();
  CHECK_NOTHROW(throw_if_stop_requested());
}

TEST_CASE("stop: the event loop stops between events and resumes without losing one") {
  const fleetsim::testing::StopGuard guard;
  EventChain whole(false);
  whole.engine.run();
  REQUIRE(whole.ran.size() == 20000);

  EventChain stopped(true);
  CHECK_THROWS_AS(stopped.engine.run(), Stopped);
  // Polled every few thousand events: soon after the request, the next event still pending.
  CHECK(stopped.ran.size() >= 5000);
  CHECK(stopped.ran.size() < 5000 + 8192);
  CHECK(stopped.engine.pending() == 1);
  clear_stop_request();
  stopped.engine.run();
  CHECK(stopped.ran == whole.ran);
  CHECK(stopped.engine.now() == whole.engine.now());
  CHECK(stopped.engine.events_processed() == whole.engine.events_processed());
}

TEST_CASE("stop: the resource watch requests a stop past its memory or wall-time limit") {
  const fleetsim::testing::StopGuard guard;
  SECTION("memory: a reading above the limit stops, one below does not") {
    std::atomic<double> resident{900e6};
    std::atomic<int> readings{0};
    ResourceWatch watch({std::nullopt, 1e9}, [&] {
      ++readings;
      return resident.load();
    });
    while (readings < 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    CHECK_FALSE(stop_requested());
    resident = 1.1e9;
    CHECK(wait_for_stop() == StopReason::memory_limit);
  }
  SECTION("wall time") {
    ResourceWatch watch({0.05, std::nullopt});
    CHECK(wait_for_stop() == StopReason::wall_limit);
  }
}

TEST_CASE("stop: the resident memory reading grows with memory touched") {
  const double before = resident_memory_bytes();
  CHECK(before > 1e6);
  std::vector<char> block(256 << 20, 1);  // 256 MiB, every page written
  const double after = resident_memory_bytes();
  CHECK(after - before > 200e6);
  CHECK(block[block.size() / 2] == 1);
}

TEST_CASE("a container's memory cap is the least along its control groups, v1 or v2") {
  const testing::TempDir mount;
  // cgroup v2: the job's group under a parent that caps it lower; the group itself says "max".
  mount.write("jobs/memory.max", "8000000000\n");
  mount.write("jobs/job-7/memory.max", "max\n");
  CHECK(cgroup_memory_cap_bytes("0::/jobs/job-7\n", mount.path()) == 8e9);
  // cgroup v1: the memory controller's line; "unlimited" is 2^63 rounded down to a page.
  mount.write("memory/slurm/memory.limit_in_bytes", "9223372036854771712\n");
  mount.write("memory/slurm/step-1/memory.limit_in_bytes", "4000000000\n");
  CHECK(cgroup_memory_cap_bytes("4:memory:/slurm/step-1\n1:cpu:/\n", mount.path()) == 4e9);
  // Both hierarchies listed: the least of all.
  CHECK(cgroup_memory_cap_bytes("4:cpu,memory:/slurm/step-1\n0::/jobs/job-7\n", mount.path()) ==
        4e9);
  // A container's own namespace: its caps at the mount's root, whatever path the host names.
  mount.write("memory.max", "2000000000\n");
  CHECK(cgroup_memory_cap_bytes("0::/elsewhere\n", mount.path()) == 2e9);
  // No cap anywhere, or nothing to read: 0.
  const testing::TempDir empty;
  CHECK(cgroup_memory_cap_bytes("0::/jobs/job-7\n", empty.path()) == 0);
  CHECK(cgroup_memory_cap_bytes("", empty.path()) == 0);
  // The process's own usable memory is at most the machine's, and something.
  CHECK(usable_memory_bytes() > 0);
  CHECK(usable_memory_bytes() <= static_cast<double>(::sysconf(_SC_PHYS_PAGES)) *
                                     static_cast<double>(::sysconf(_SC_PAGESIZE)));
}
