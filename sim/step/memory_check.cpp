// The memory check of a step's inputs: the breakdown of memory per GPU against the device (and
// the host under optimizer offload), with its warnings. A layout that does not fit is not
// replayed (simulate_step).
#include "sim/step/memory_check.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <utility>

#include "sim/engine/errors.hpp"
#include "workloads/layout/rank_grid.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {
namespace {

// What the collective library sees: the channels the GPU's profile runs (one thread block, so
// one SM, each: comm_sms), the NVLink domain and the NICs of its node, whether NVLS runs, and
// the GPU's generation.
CommunicatorDevice communicator_device(const StepInputs& inputs) {
  return {.channels = std::max(1, static_cast<int>(std::lround(inputs.gpu.comm_sms.value))),
          .domain_gpus = inputs.node.gpus * inputs.node.nvlink_domain_nodes,
          .nics_per_gpu = static_cast<double>(inputs.node.nics) / inputs.node.gpus,
          .nic_bytes_per_s = inputs.node.nic_bytes_per_s,
          .nvls = inputs.node.nvls,
          .compute_capability = inputs.gpu.compute_capability.value_or(0)};
}

}  // namespace

MemoryDevice memory_device(const StepInputs& inputs) {
  return {.capacity_bytes = inputs.gpu.hbm_capacity_bytes.value,
          .fp8_gemm_any_layout = fp8_gemm_any_layout(inputs.gpu),
          .communicators = communicator_device(inputs)};
}

StepOutcome check_memory(const StepInputs& inputs) {
  validate_job(inputs.model, inputs.training, inputs.plan);
  StepOutcome outcome;
  MemoryBreakdown& memory = outcome.memory;
  memory = estimate_memory(inputs.model, inputs.training, inputs.plan, memory_device(inputs));
  memory.host_capacity_bytes = inputs.node.host_memory_capacity_bytes;
  if (inputs.plan.offloads_to_host()) {
    if (inputs.plan.offload_optimizer && !inputs.node.describes_host()) {
      throw ModelError("optimizer offload needs node " + inputs.node.name +
                       " to describe its host: host_memory, host_memory_capacity, cpu_cores, "
                       "cpu_clock and cpu_adam_cycles_per_parameter");
    }
    memory.host_bytes_per_node = memory.host_bytes_per_rank * inputs.ranks_per_node();
  }
  if (!memory.gpu_fits()) {
    char text[160];
    std::snprintf(text, sizeof text, "does not fit: needs %.1f GB per GPU, %.1f GB available",
                  memory.total_bytes / 1e9, memory.capacity_bytes / 1e9);
    outcome.warnings.push_back(text);
  }
  if (!memory.host_fits()) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "does not fit: what is offloaded needs %.1f GB of host memory per node, "
                  "%.1f GB available",
                  memory.host_bytes_per_node / 1e9, memory.host_capacity_bytes / 1e9);
    outcome.warnings.push_back(text);
  }
  if (!memory.fits()) return outcome;
  if (outcome.memory.headroom_fraction() < kMinComfortableHeadroom) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "memory headroom %.0f%% is under the %.0f%% practitioners keep free",
                  100 * outcome.memory.headroom_fraction(), 100 * kMinComfortableHeadroom);
    outcome.warnings.push_back(text);
  }
  return outcome;
}

void add_memory_in_use(const StepInputs& inputs, StepResult& step) {
  const RankGrid grid(inputs.plan);
  // By stage: what the memory model counts at its peak besides activations and what is held at
  // one moment only, and a decoder layer's share of its activations.
  std::map<int, std::pair<double, double>> stages;
  for (const StepResult::MemoryInUse& sample : step.trace_memory) {
    const int stage = grid.stage_of(sample.rank);
    if (stages.contains(stage)) continue;
    const MemoryBreakdown memory = estimate_stage_memory(inputs.model, inputs.training, inputs.plan,
                                                         memory_device(inputs), stage);
    auto& [state, per_layer] = stages[stage];
    for (const MemoryItem& item : memory.items) {
      if (item.name == kActivationsItem) {
        per_layer = memory.activation_layers > 0 ? item.bytes / memory.activation_layers : 0.0;
      } else if (item.moment == MemoryMoment::all_along) {
        state += item.bytes;
      }
    }
  }
  for (StepResult::MemoryInUse& sample : step.trace_memory) {
    const auto [state, per_layer] = stages.at(grid.stage_of(sample.rank));
    sample.state_bytes = state;
    sample.activation_bytes = per_layer * sample.saved_layers;
  }
}

}  // namespace fleetsim
