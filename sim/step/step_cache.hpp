// Step simulations shared by whoever asks for the same step: the variants of a scenario whose
// step inputs are equal (compare entries that change only the run), and the degraded and
// shrunk states of their runs, which every such variant asks for again. The replay is
// deterministic, so a step reused is the step simulated again.
#pragma once

#include <cstddef>
#include <cstdint>
#include <future>
#include <list>
#include <mutex>

#include "sim/step/step_inputs.hpp"

namespace fleetsim {

class StepCache {
 public:
  // At most `capacity` finished steps are kept, the least recently asked for dropped first.
  explicit StepCache(std::size_t capacity = 64) : capacity_(capacity) {}
  StepCache(const StepCache&) = delete;
  StepCache& operator=(const StepCache&) = delete;

  // simulate_step(inputs, options), or its outcome from an earlier call. Thread-safe: a step
  // another thread is simulating is waited for, not simulated twice. An exception (a
  // ModelError, a stop) reaches every caller waiting for that step, and the step is not kept.
  // A traced step (its slices take much memory) is simulated each time and not kept.
  StepOutcome simulate(const StepInputs& inputs, const StepOptions& options);

  // How many calls simulated a step, and how many reused one (for benchmarks and tests).
  std::size_t simulated() const;
  std::size_t reused() const;

 private:
  struct Entry {
    std::uint64_t id;  // which call added it
    std::uint64_t hash;
    StepInputs inputs;
    StepOptions options;
    std::shared_future<StepOutcome> outcome;
  };
  std::size_t capacity_;
  mutable std::mutex mutex_;
  std::list<Entry> entries_;   // most recently asked for first
  std::size_t simulated_ = 0;  // also numbers the entries
  std::size_t reused_ = 0;
};

}  // namespace fleetsim
