#include "sim/engine/engine.hpp"

#include <string>

#include "sim/engine/errors.hpp"
#include "sim/engine/stop.hpp"

namespace fleetsim {
namespace {

constexpr std::uint64_t kStopPollEvents = 4096;

}  // namespace

std::uint32_t Engine::acquire_slot() {
  if (!free_slots_.empty()) {
    const std::uint32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }
  slots_.emplace_back();
  return static_cast<std::uint32_t>(slots_.size() - 1);
}

EventHandle Engine::schedule_at(SimTime at, Callback callback) {
  if (at < now_) {
    throw ModelError("event scheduled in the past: at " + std::to_string(at.ns()) + " ns, now " +
                     std::to_string(now_.ns()) + " ns");
  }
  const std::uint32_t slot = acquire_slot();
  const std::uint64_t sequence = next_sequence_++;
  slots_[slot].callback = std::move(callback);
  slots_[slot].sequence = sequence;
  queue_.push(Entry{at, sequence, slot});
  ++pending_;
  return EventHandle{slot, sequence};
}

bool Engine::cancel(EventHandle handle) {
  if (!handle.valid() || handle.slot >= slots_.size()) return false;
  Slot& slot = slots_[handle.slot];
  if (slot.sequence != handle.sequence) return false;  // already ran or cancelled
  slot.callback = nullptr;
  slot.sequence = 0;
  --pending_;
  // The queue entry stays; run() sees the sequence mismatch and frees the slot then.
  return true;
}

void Engine::run(SimTime until) {
  while (!queue_.empty()) {
    // A stop (Ctrl-C, a limit) is polled often enough to answer quickly, and rarely enough to
    // cost nothing; before the next event, which stays pending.
    if (events_processed_ % kStopPollEvents == 0) throw_if_stop_requested();
    const Entry entry = queue_.top();
    if (entry.at > until) break;
    queue_.pop();
    Slot& slot = slots_[entry.slot];
    if (slot.sequence != entry.sequence) {  // cancelled
      if (slot.sequence == 0) free_slots_.push_back(entry.slot);
      continue;
    }
    Callback callback = std::move(slot.callback);
    slot.callback = nullptr;
    slot.sequence = 0;
    free_slots_.push_back(entry.slot);
    --pending_;
    now_ = entry.at;
    ++events_processed_;
    callback();
  }
  if (until != SimTime::max() && until > now_) now_ = until;
}

std::uint64_t run_reference_events(int pending, int events) {
  Engine engine;
  int remaining = events;
  std::function<void()> tick;
  tick = [&] {
    if (--remaining > 0) engine.schedule_after(SimTime::from_ns(1 + remaining % 97), tick);
  };
  for (int i = 0; i < pending; ++i) engine.schedule_after(SimTime::from_ns(i), tick);
  engine.run();
  return engine.events_processed();
}

}  // namespace fleetsim
