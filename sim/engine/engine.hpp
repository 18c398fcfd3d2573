// The discrete-event kernel.
//
// Events are callbacks scheduled at a SimTime. They run in (time, sequence) order, where the
// sequence number is assigned at scheduling, so ties resolve in the order they were scheduled and
// a run is a pure function of its inputs. An event can be cancelled through its handle; a
// cancelled event is skipped when it reaches the front of the queue (lazy deletion keeps
// cancellation O(1) and scheduling O(log n)).
//
// The engine knows nothing about GPUs or networks. There is no global engine: models receive a
// reference, so several simulations can run side by side in one process.
#pragma once

#include <cstdint>
#include <functional>
#include <queue>
#include <vector>

#include "sim/engine/time.hpp"

namespace fleetsim {

// Identifies one scheduled event; stays valid (and harmless to cancel) after the event ran.
struct EventHandle {
  std::uint32_t slot = UINT32_MAX;
  std::uint64_t sequence = 0;
  bool valid() const { return slot != UINT32_MAX; }
};

class Engine {
 public:
  using Callback = std::function<void()>;

  SimTime now() const { return now_; }

  // Precondition: at >= now().
  EventHandle schedule_at(SimTime at, Callback callback);
  EventHandle schedule_after(SimTime delay, Callback callback) {
    return schedule_at(now_ + delay, std::move(callback));
  }
  // Returns true if the event was pending and is now cancelled.
  bool cancel(EventHandle handle);

  // Runs events until the queue is empty or the next event lies after `until`; then, if an
  // `until` was given, the clock stands at it, so a caller can simulate in segments. Throws
  // Stopped (sim/engine/stop.hpp) when a stop is requested meanwhile, the next event still
  // pending (but for one whose callback ran another engine that threw: that one is lost).
  void run(SimTime until = SimTime::max());
  std::uint64_t events_processed() const { return events_processed_; }
  std::size_t pending() const { return pending_; }

 private:
  struct Entry {
    SimTime at;
    std::uint64_t sequence;
    std::uint32_t slot;
    bool operator>(const Entry& other) const {
      if (at != other.at) return at > other.at;
      return sequence > other.sequence;
    }
  };
  struct Slot {
    Callback callback;
    std::uint64_t sequence = 0;  // the sequence of the event that owns the slot, 0 when free
  };

  std::uint32_t acquire_slot();

  SimTime now_{};
  std::uint64_t next_sequence_ = 1;
  std::uint64_t events_processed_ = 0;
  std::size_t pending_ = 0;
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> queue_;
  std::vector<Slot> slots_;
  std::vector<std::uint32_t> free_slots_;
};

// The engine's reference workload: `pending` chains of events, each event scheduling the next
// of its chain a few nanoseconds on, `events` in all; returns the events processed. Its rate on a
// machine (events per second, with one event pending) is the yardstick that benchmarks quote
// beside their times, so that times taken on different machines or days compare.
std::uint64_t run_reference_events(int pending, int events);

}  // namespace fleetsim
