// The order in which a pipeline stage runs its passes: 1F1B, interleaved 1F1B and GPipe, as
// Megatron-Core schedules them. The task graph replays it, the memory model counts what it
// holds in flight.
#pragma once

#include <vector>

#include "workloads/layout/parallel_plan.hpp"

namespace fleetsim {

// One forward or backward pass of a micro-batch through one of a stage's model chunks.
struct Pass {
  bool forward;
  int micro_batch;
  int chunk;  // 0 unless the schedule is interleaved
  // Under ep_comm_overlap, a steady-state forward that runs merged with the backward after it
  // (never a warm-up forward, whose backward comes later).
  bool merged = false;
};

// The order of pipeline stage `stage`'s passes over micro-batches 0..m-1 under plan's schedule
// (without a pipeline: each micro-batch's backward right after its forward).
std::vector<Pass> pipeline_schedule(const ParallelPlan& plan, int stage, int m);

}  // namespace fleetsim
