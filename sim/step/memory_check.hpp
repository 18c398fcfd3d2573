// The memory check of a step: the memory model (workloads/memory_model.hpp) applied to a
// step's inputs, with the device's and the host's capacity and the warnings a person needs.
#pragma once

#include "sim/step/step_inputs.hpp"
#include "workloads/memory_model.hpp"

namespace fleetsim {

// The breakdown and its warnings ("does not fit", low headroom), nothing replayed. Throws
// ModelError for a job that breaks its rules (validate_job).
StepOutcome check_memory(const StepInputs& inputs);

// What the memory model needs to know of the inputs' GPU and node.
MemoryDevice memory_device(const StepInputs& inputs);

// A traced step's memory in use (StepResult::trace_memory): each sample's bytes, from the memory
// model's breakdown of the rank's stage.
void add_memory_in_use(const StepInputs& inputs, StepResult& step);

}  // namespace fleetsim
