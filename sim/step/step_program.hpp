// A stage program's static structure, shared by the stage's ranks, as the replay reads it:
// dependents and dependencies of each task, each stream's order, which streams a task's end can
// wake, and the compute stream's kernel timeline at each number of SMs that collectives hold
// beside it (kernel_cost.hpp), built once per count and read as prefix sums.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <span>
#include <unordered_map>
#include <utility>
#include <variant>
#include <vector>

#include "calibration/gpu_profile.hpp"
#include "calibration/kernel_cost.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/time.hpp"
#include "workloads/task_graph.hpp"

namespace fleetsim::step_detail {

// One list of numbers per task, stored back to back: read in order, as replay does millions of
// times, they cost one cache line where a vector per task costs a pointer chase each.
class TaskLists {
 public:
  // Built in two passes over (task, item) pairs, each task's items in the order given:
  // `each(add)` calls add(t, item) for every pair, the same pairs in the same order both times
  // (first counting, then filling), without a vector per task.
  template <typename Each>
  TaskLists(std::size_t tasks, Each each) : begin_(tasks + 1, 0) {
    each([&](TaskIndex t, std::uint32_t) { ++begin_[t + 1]; });
    for (std::size_t t = 0; t < tasks; ++t) begin_[t + 1] += begin_[t];
    items_.resize(begin_[tasks]);
    std::vector<std::size_t> next(begin_.begin(), begin_.end() - 1);
    each([&](TaskIndex t, std::uint32_t item) { items_[next[t]++] = item; });
  }
  std::span<const std::uint32_t> operator[](TaskIndex t) const {
    return {items_.data() + begin_[t], items_.data() + begin_[t + 1]};
  }

 private:
  std::vector<std::size_t> begin_;
  std::vector<std::uint32_t> items_;
};

struct ProgramIndex {
  TaskLists dependents;
  // Each stream's tasks in program order; pipeline transfers run out of order, so not listed.
  std::array<std::vector<TaskIndex>, kStreamCount> order;
  std::vector<TaskIndex> unordered;  // transfers with no dependencies
  // The streams whose head a task's end can unblock: its own and its dependents', as bits.
  std::vector<std::uint8_t> wakes;
  static_assert(kStreamCount <= 8, "a stream is a bit of a byte in `wakes`");
  std::vector<std::size_t> position;  // of each task in its stream's order
  // Of each task, the stream positions of the dependencies it has on the compute stream.
  TaskLists compute_dep_positions;
  std::vector<int> dependencies;  // of each task: how many it waits on before any has run
  std::vector<Stream> stream;     // of each task (read often: kept apart from the tasks)

  ProgramIndex(const Program& program, const GpuProfile& gpu)
      : dependents(dependents_of(program)),
        compute_dep_positions(compute_dep_positions_of(program)),
        gpu_(&gpu) {
    dependencies.resize(program.size());
    stream.resize(program.size());
    wakes.resize(program.size());
    position.resize(program.size());
    for (TaskIndex t = 0; t < program.size(); ++t) {
      const auto bit = static_cast<std::uint8_t>(1u << static_cast<int>(program[t].stream));
      wakes[t] |= bit;
      dependencies[t] = static_cast<int>(program[t].deps.size());
      stream[t] = program[t].stream;
      for (const TaskIndex d : program[t].deps) {
        wakes[d] |= bit;
      }
      if (program[t].stream != Stream::pipeline) {
        std::vector<TaskIndex>& stream = order[static_cast<int>(program[t].stream)];
        position[t] = stream.size();
        stream.push_back(t);
      } else if (program[t].deps.empty()) {
        unordered.push_back(t);
      }
    }
    // A program repeats its layers' kernels many times over: each distinct one is costed once
    // for each number of SMs held beside it.
    std::unordered_map<const Kernel*, std::uint32_t> distinct;  // kept once each by the program
    const std::vector<TaskIndex>& compute = order[static_cast<int>(Stream::compute)];
    kernel_at_.assign(compute.size(), kNoKernel);
    for (std::size_t i = 0; i < compute.size(); ++i) {
      if (const auto* work = std::get_if<ComputeWork>(&program[compute[i]].work)) {
        const auto [at, added] =
            distinct.try_emplace(work->kernel, static_cast<std::uint32_t>(kernels_.size()));
        if (added) kernels_.push_back(*work->kernel);
        kernel_at_[i] = at->second;
      }
    }
    compute_ns_before(0, 0);
  }

  // The compute stream's kernels' durations summed in stream order while the rank's
  // collectives hold `sms_held` of the GPU's SMs and move `hbm_taken` bytes/s of its HBM:
  // element i is the nanoseconds of the kernels before position i, so a kernel's is a
  // difference. Built the first time a state is asked for (a rank meets a few: no collective,
  // one group's, two groups').
  const std::vector<std::int64_t>& compute_ns_before(int sms_held, std::int64_t hbm_taken) {
    const auto [at, added] = ns_before_.try_emplace({sms_held, hbm_taken});
    if (!added) return at->second;
    std::vector<std::int64_t> ns(kernels_.size());
    for (std::size_t k = 0; k < kernels_.size(); ++k) {
      ns[k] =
          from_seconds(kernel_seconds(*gpu_, kernels_[k], sms_held, static_cast<double>(hbm_taken)))
              .ns();
    }
    std::vector<std::int64_t>& before = at->second;
    before.assign(kernel_at_.size() + 1, 0);
    for (std::size_t i = 0; i < kernel_at_.size(); ++i) {
      before[i + 1] = before[i] + (kernel_at_[i] == kNoKernel ? 0 : ns[kernel_at_[i]]);
    }
    return before;
  }

 private:
  static constexpr std::uint32_t kNoKernel = ~std::uint32_t{0};
  const GpuProfile* gpu_;
  std::vector<Kernel> kernels_;           // the compute stream's distinct kernels
  std::vector<std::uint32_t> kernel_at_;  // of each compute stream position (kNoKernel: none)
  // By SMs held and HBM bytes/s taken.
  std::map<std::pair<int, std::int64_t>, std::vector<std::int64_t>> ns_before_;

  static TaskLists dependents_of(const Program& program) {
    return TaskLists(program.size(), [&](auto add) {
      for (TaskIndex t = 0; t < program.size(); ++t) {
        for (const TaskIndex d : program[t].deps) {
          if (d >= t)
            throw ModelError("task " + std::string(program[t].name) + " depends on a later task");
          add(d, t);
        }
      }
    });
  }
  static TaskLists compute_dep_positions_of(const Program& program) {
    constexpr std::uint32_t kNotCompute = ~std::uint32_t{0};
    std::vector<std::uint32_t> compute_position(program.size(), kNotCompute);
    std::uint32_t computed = 0;
    for (TaskIndex t = 0; t < program.size(); ++t) {
      if (program[t].stream == Stream::compute) compute_position[t] = computed++;
    }
    return TaskLists(program.size(), [&](auto add) {
      for (TaskIndex t = 0; t < program.size(); ++t) {
        for (const TaskIndex d : program[t].deps) {
          if (compute_position[d] != kNotCompute) add(t, compute_position[d]);
        }
      }
    });
  }
};

}  // namespace fleetsim::step_detail
