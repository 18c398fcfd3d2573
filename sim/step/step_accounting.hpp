// What each replayed rank of a step was busy with, and the step's breakdown from it: compute,
// communication exposed (the compute stream idle) by what it is for, and idle time, summed in
// integer nanoseconds so that they add up exactly to the step time.
#pragma once

#include <array>
#include <vector>

#include "sim/engine/time.hpp"
#include "sim/step/step_inputs.hpp"
#include "workloads/layout/rank_grid.hpp"

namespace fleetsim::step_detail {

// Communication by what it is for, so that exposed time can be told apart (StepBreakdown):
// data-parallel gradient reductions and parameter gathers (of the data group, or of an
// expert's), a layer's collectives (of the tensor, context and expert groups, each apart),
// pipeline transfers, and optimizer offload's copies over PCIe.
enum CommKind {
  kDataParallelComm,
  kTensorComm,
  kContextComm,
  kExpertComm,
  kPipelineComm,
  kHostComm,
  kCommKinds
};
static_assert(kExposedParts.size() == kCommKinds, "a StepBreakdown part for each kind");
// Throws ModelError for a group that carries no communication.
CommKind comm_kind(GroupKind group);

struct Interval {
  SimTime begin;
  SimTime end;
};

// One rank's busy intervals: its compute stream's (serial, so disjoint and in order), and its
// communication's by kind (each kind's possibly overlapping).
struct RankActivity {
  std::vector<Interval> compute_busy;
  std::array<std::vector<Interval>, kCommKinds> comm_busy;
};

// The breakdown averaged over the replayed ranks (folded replicas run as their representative
// does, so that is the average over all) of a step of `step`.
StepBreakdown step_breakdown(const std::vector<const RankActivity*>& replayed, SimTime step);

}  // namespace fleetsim::step_detail
