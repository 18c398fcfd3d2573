// The per-rank task graph of one training step: what runs, not how long it takes.
//
// A rank runs in-order streams, as a PyTorch rank does: kernels on the compute stream, parameter
// all-gathers on one communication stream and gradient reductions on another (FSDP issues them
// on separate CUDA streams, so a prefetch never waits behind a reduce-scatter). A task starts
// when it reaches the head of its stream and every task it depends on has finished; a
// collective also waits for all members of its group. The step executor (sim/step) replays the
// graph and decides the durations.
//
// Every rank runs the same program, so the graph holds it once. Ranks are tp x dp with the
// tensor-parallel rank innermost (rank r is tp rank r % tp of data-parallel replica r / tp):
// a tensor-parallel collective spans the tp consecutive ranks of a replica, a data-parallel one
// the dp ranks of the same tp rank. Tensor-parallel collectives run on their own stream and the
// compute stream waits for each (Megatron's, without communication overlap).
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "calibration/kernel_cost.hpp"
#include "topology/collective_op.hpp"
#include "workloads/model_spec.hpp"

namespace fleetsim {

enum class Stream { compute, gather, reduce, tensor };
inline constexpr int kStreamCount = 4;
inline const char* to_string(Stream stream) {
  switch (stream) {
    case Stream::compute: return "compute";
    case Stream::gather: return "gather";
    case Stream::reduce: return "reduce";
    case Stream::tensor: return "tensor";
  }
  return "?";
}

// Which ranks a collective spans.
enum class Group { data_parallel, tensor_parallel };

// FSDP keeps at most this many units' full parameters at once: the one computing and the one
// prefetched behind it (PyTorch FSDP's default backward prefetch and limit_all_gathers).
inline constexpr int kFsdpUnitsGathered = 2;

struct ComputeWork {
  Kernel kernel;
  double model_flops = 0;  // FLOPs counted for MFU (0 for recomputation)
};

struct CollectiveWork {
  CollectiveOp op;
  double size_bytes = 0;  // nccl-tests message size S
  Group group = Group::data_parallel;
};

using TaskIndex = std::uint32_t;

struct Task {
  std::string name;
  Stream stream;
  std::variant<ComputeWork, CollectiveWork> work;
  std::vector<TaskIndex> deps;  // earlier tasks of the same program
};

struct TaskGraph {
  int ranks = 1;  // tp x dp
  int tp = 1;
  std::vector<Task> program;  // identical on every rank
  double tokens_per_step = 0;
  double model_flops_per_rank = 0;     // sum of model_flops over the program
  double hardware_flops_per_rank = 0;  // sum of executed kernel FLOPs
  int micro_batches = 0;               // gradient accumulation steps per optimizer step
};

// Builds one optimizer step of data-parallel training (ZeRO stage 0-3, bucketed gradient
// reduction overlapped with the backward pass), each replica tensor-parallel over plan.tp
// ranks. Throws ModelError on an inconsistent plan.
TaskGraph build_data_parallel_step(const ModelSpec& model, const TrainingSpec& training,
                                   const ParallelPlan& plan);

}  // namespace fleetsim
