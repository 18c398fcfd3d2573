#include "sim/analysis/configuration.hpp"

#include <algorithm>

#include "topology/topology.hpp"

namespace fleetsim {
namespace {

void strip(Calibrated& entry) {
  entry.sigma = 0;
  entry.provenance.clear();
}

}  // namespace

std::vector<std::string> used_link_kinds(const StepInputs& inputs) {
  std::vector<std::string> kinds;
  const NodeSpec& node = inputs.node;
  if (node.gpus > 1 || node.nvlink_domain_nodes > 1) {
    if (node.gpu_fabric == GpuFabric::nvswitch || node.gpu_fabric == GpuFabric::nvlink_pairs) {
      kinds.push_back("nvlink");
    } else if (node.gpu_fabric == GpuFabric::xgmi_mesh) {
      kinds.push_back("xgmi");
    }
  }
  kinds.push_back("pcie");
  if (inputs.nodes > 1) kinds.push_back(to_string(fabric_link_kind(node.nic_kind)));
  return kinds;
}

StepInputs simulated_part(StepInputs inputs, const std::vector<std::string>& kinds) {
  for (std::string* text :
       {&inputs.node.name, &inputs.node.description, &inputs.node.source, &inputs.node.gpu_profile,
        &inputs.gpu.name, &inputs.gpu.description, &inputs.model.name, &inputs.model.source,
        &inputs.gpu.collectives.source, &inputs.gpu.collectives.tree_model_source}) {
    text->clear();
  }
  GpuProfile& gpu = inputs.gpu;
  for (const ProfileEntryKey& key : kProfileEntryKeys) {
    if (Calibrated* entry = find_profile_entry(gpu, key.key)) strip(*entry);
  }
  for (const Fp8EntryKey& key : kFp8Entries) {
    if (gpu.fp8) strip((*gpu.fp8).*key.member);
  }
  for (auto& [kernel, rates] : gpu.attention) {
    for (const AttentionEntryKey& key : kAttentionEntries)
      strip(rates.*key.pass_member.*key.member);
  }
  std::erase_if(gpu.link_efficiency, [&](const auto& entry) {
    return std::find(kinds.begin(), kinds.end(), entry.first) == kinds.end();
  });
  for (auto& [kind, entry] : gpu.link_efficiency) strip(entry);
  return inputs;
}

std::optional<RunSpec> simulated_part(std::optional<RunSpec> run) {
  if (!run) return run;
  run->interruptions.clear();
  for (InterruptionCause& cause : run->causes) cause.source.clear();
  for (Degradation& degradation : run->degradations) degradation.source.clear();
  if (run->spot) run->spot->source.clear();
  return run;
}

}  // namespace fleetsim
