#include "sim/analysis/configuration.hpp"

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>

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

// The range an entry of this quantity stays in: a share, a rate, or an amount that may be 0.
EntryRange range_of(ProfileQuantity quantity) {
  switch (quantity) {
    case ProfileQuantity::fraction: return EntryRange::fraction;
    case ProfileQuantity::count:
    case ProfileQuantity::duration: return EntryRange::non_negative;
    default: return EntryRange::rate;
  }
}

std::vector<StepProfileEntry> step_profile_entries(const StepInputs& inputs) {
  // The kernel model's entries (their quantities the profile file's: kProfileEntryKeys).
  std::vector<StepProfileEntry> entries;
  for (const char* key : {"dense_bf16", "hbm_bandwidth", "gemm_efficiency", "gemm_sustained",
                          "gemm_k_overhead", "memory_efficiency", "kernel_launch", "comm_sms"}) {
    const auto entry =
        std::find_if(kProfileEntryKeys.begin(), kProfileEntryKeys.end(),
                     [&](const ProfileEntryKey& k) { return k.key == std::string_view(key); });
    if (entry == kProfileEntryKeys.end()) {
      throw std::logic_error(std::string("no profile entry ") + key);
    }
    entries.push_back({key, range_of(entry->quantity)});
  }
  if (inputs.training.attention == Attention::flash) {
    const std::string kernel = attention_kernel_name(
        inputs.training.attention_kernel.value_or(inputs.gpu.attention_default));
    for (const AttentionEntryKey& key : kAttentionEntries) {
      entries.push_back(
          {"attention." + kernel + "." + key.pass + "." + key.field, range_of(key.quantity)});
    }
    // The share of those rates a step keeps (a GEMM ceiling scaled by it holds it already).
    entries.push_back({"sustained_clock", EntryRange::fraction});
  }
  if (inputs.training.precision == Precision::fp8) {
    for (const Fp8EntryKey& key : kFp8Entries) entries.push_back({key.key, range_of(key.quantity)});
  }
  for (const std::string& kind : used_link_kinds(inputs)) {
    entries.push_back({"link_efficiency." + kind, EntryRange::fraction});
  }
  if (inputs.node.nvls) entries.push_back({"nvls_efficiency", EntryRange::fraction});
  const ParallelPlan& plan = inputs.plan;
  if (plan.pp > 1 || plan.cp > 1 || plan.ep > 1) {
    entries.push_back({"p2p_efficiency", EntryRange::fraction});
  }
  return entries;
}

std::vector<std::string> read_profile_keys(const StepInputs& inputs) {
  std::vector<std::string> keys{"hbm_capacity"};
  for (const StepProfileEntry& entry : step_profile_entries(inputs)) keys.push_back(entry.key);
  return keys;
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
