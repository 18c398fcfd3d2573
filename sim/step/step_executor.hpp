// The step executor: replays a task graph on the engine, kernels on each rank's compute stream
// and collectives as flows on the topology, and measures the step.
//
// Each rank runs its pipeline stage's program on the streams of task_graph.hpp (compute, the
// parameter gathers, the gradient reductions, a layer's collectives, and under optimizer offload
// the host copies and the CPU's work), each running its tasks in program order; a task starts
// when it heads its stream and its dependencies are done, and a collective starts when every
// member of its group (rank_grid.hpp) has reached it. Pipeline transfers run out of stream
// order, as soon as their dependencies are done: a send and the matching receive on the other
// stage's rank form one transfer. Kernel durations come from
// the GPU's calibration profile, run on the SMs that the rank's collectives in flight leave them
// (comm_sms each); collective durations from the flow network, so traffic that shares a link
// shares its bandwidth.
#pragma once

#include "calibration/gpu_profile.hpp"
#include "sim/collectives/collectives.hpp"
#include "sim/step/memory_check.hpp"
#include "sim/step/step_inputs.hpp"
#include "topology/topology.hpp"
#include "workloads/task_graph.hpp"

namespace fleetsim {

// Usable capacity of each link: line rate times the profile's efficiency for its kind.
std::vector<double> usable_link_capacities(const Topology& topology, const GpuProfile& gpu);

// How this GPU's links to its peers run under NVLS, rings and point-to-point sends.
GpuLinkModes gpu_link_modes(const GpuProfile& gpu);

// What CPU work costs on the hosts under optimizer offload: the cycles one core spends on one
// parameter's Adam update (NodeSpec::cpu_adam_cycles_per_parameter). The topology gives each
// host's memory and cores.
struct HostCosts {
  double adam_cycles_per_parameter = 0;
};

// Replays one step of `graph` with its ranks on the first graph.grid.ranks() GPUs of
// `topology`.
StepResult execute_step(const TaskGraph& graph, const GpuProfile& gpu, const Topology& topology,
                        const StepOptions& options = {}, const HostCosts& host = {});

// The whole pipeline for one configuration: memory check, task graph, topology, replay.
// A layout that does not fit is reported with its memory breakdown and not replayed.
StepOutcome simulate_step(const StepInputs& inputs, const StepOptions& options = {});

}  // namespace fleetsim
