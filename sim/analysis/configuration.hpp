// What of a configuration the simulation reads: the analyses compare configurations by it, so
// that a name, a source, a sigma or the efficiency of a link the cluster does not have is never
// taken for a difference.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sim/job/job.hpp"
#include "sim/step/step_inputs.hpp"

namespace fleetsim {

// The link kinds the configuration's traffic can cross: its GPU fabric's ("nvlink", "xgmi")
// where a GPU has peers, "pcie", and between nodes its NICs' ("infiniband", "roce", "efa").
std::vector<std::string> used_link_kinds(const StepInputs& inputs);

// The range a value of a profile entry stays in: a share (at most 1), a rate (above 0), or an
// amount that may be 0 (an overhead, a count of SMs).
enum class EntryRange { fraction, rate, non_negative };
struct StepProfileEntry {
  std::string key;  // as find_profile_entry (calibration/gpu_profile.hpp) takes it
  EntryRange range;
};
// The GPU profile entries the configuration's step reads, in a fixed order: the kernel model's;
// under flash attention its kernel's passes and the share of their rates a step keeps
// (sustained_clock); FP8's under FP8; the efficiency of each link kind it crosses; NVLS's where
// the node has it and p2p's with pipeline, context or expert parallelism.
std::vector<StepProfileEntry> step_profile_entries(const StepInputs& inputs);
// Every profile entry a variant reads: the memory check's capacity, then the step's.
std::vector<std::string> read_profile_keys(const StepInputs& inputs);

// `inputs` with what the simulation does not read cleared: names, descriptions and sources,
// every calibrated number's sigma and provenance, and the efficiencies of link kinds not in
// `kinds`.
StepInputs simulated_part(StepInputs inputs, const std::vector<std::string>& kinds);
// `run` with its causes', degradations' and spot capacity's sources and its preset's name
// cleared.
std::optional<RunSpec> simulated_part(std::optional<RunSpec> run);

}  // namespace fleetsim
