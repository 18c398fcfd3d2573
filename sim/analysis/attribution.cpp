#include "sim/analysis/attribution.hpp"

#include <tbb/parallel_for.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <map>

#include "sim/analysis/configuration.hpp"
#include "sim/engine/errors.hpp"
#include "sim/job/job_of_step.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

// Which factor a GPU's link efficiency belongs to, by the link kind it is for.
Factor link_factor(const std::string& kind) {
  if (kind == "nvlink" || kind == "xgmi") return Factor::scale_up;
  if (kind == "pcie" || kind == "host_memory") return Factor::host;
  return Factor::network;
}

void take_links(Factor factor, std::map<std::string, Calibrated>& to,
                const std::map<std::string, Calibrated>& from) {
  std::erase_if(to, [&](const auto& entry) { return link_factor(entry.first) == factor; });
  for (const auto& entry : from) {
    if (link_factor(entry.first) == factor) to.insert(entry);
  }
}

void take_step_factor(Factor factor, StepInputs& to, const StepInputs& from) {
  GpuProfile& gpu = to.gpu;
  const GpuProfile& other = from.gpu;
  NodeSpec& node = to.node;
  const NodeSpec& source = from.node;
  switch (factor) {
    case Factor::compute:
      gpu.sm_count = other.sm_count;
      gpu.dense_bf16_flops_per_s = other.dense_bf16_flops_per_s;
      gpu.gemm_efficiency = other.gemm_efficiency;
      gpu.gemm_sustained_flops_per_s = other.gemm_sustained_flops_per_s;
      gpu.sustained_clock = other.sustained_clock;
      gpu.gemm_k_overhead = other.gemm_k_overhead;
      gpu.gemm_tiles = other.gemm_tiles;
      gpu.attention = other.attention;
      gpu.attention_default = other.attention_default;
      // The attention kernel a recipe names is the GPU's to run: it goes with the profile.
      to.training.attention_kernel = from.training.attention_kernel;
      gpu.kernel_launch_s = other.kernel_launch_s;
      gpu.comm_sms = other.comm_sms;
      gpu.fp8 = other.fp8;
      return;
    case Factor::hbm_bandwidth:
      gpu.hbm_bytes_per_s = other.hbm_bytes_per_s;
      gpu.memory_efficiency = other.memory_efficiency;
      return;
    case Factor::scale_up:
      node.gpu_fabric = source.gpu_fabric;
      node.nvlink_bytes_per_s = source.nvlink_bytes_per_s;
      node.nvlink_latency = source.nvlink_latency;
      node.nvlink_domain_nodes = source.nvlink_domain_nodes;
      node.nvls = source.nvls;
      node.xgmi_link_bytes_per_s = source.xgmi_link_bytes_per_s;
      node.xgmi_latency = source.xgmi_latency;
      gpu.nvls_efficiency = other.nvls_efficiency;
      gpu.p2p_efficiency = other.p2p_efficiency;
      take_links(factor, gpu.link_efficiency, other.link_efficiency);
      return;
    case Factor::host:
      node.pcie_switches = source.pcie_switches;
      node.pcie_bytes_per_s = source.pcie_bytes_per_s;
      node.pcie_latency = source.pcie_latency;
      node.host_bytes_per_s = source.host_bytes_per_s;
      node.gpu_p2p = source.gpu_p2p;
      node.host_memory_bytes_per_s = source.host_memory_bytes_per_s;
      node.host_memory_efficiency = source.host_memory_efficiency;
      node.cpu_cores = source.cpu_cores;
      node.cpu_clock_hz = source.cpu_clock_hz;
      node.cpu_adam_cycles_per_parameter = source.cpu_adam_cycles_per_parameter;
      take_links(factor, gpu.link_efficiency, other.link_efficiency);
      return;
    case Factor::network:
      node.nics = source.nics;
      node.nic_kind = source.nic_kind;
      node.nic_bytes_per_s = source.nic_bytes_per_s;
      node.nic_latency = source.nic_latency;
      to.fabric = from.fabric;
      take_links(factor, gpu.link_efficiency, other.link_efficiency);
      return;
    case Factor::collective_library:
      gpu.collectives = other.collectives;
      // What chose the tree's limits; it also tells whether Transformer Engine keeps FP8
      // transposes, a difference of memory only, counted here with it.
      gpu.compute_capability = other.compute_capability;
      return;
    case Factor::memory_and_layout:
      gpu.hbm_capacity_bytes = other.hbm_capacity_bytes;
      node.host_memory_capacity_bytes = source.host_memory_capacity_bytes;
      node.gpus = source.gpus;
      to.nodes = from.nodes;
      to.model = from.model;
      {
        const std::optional<AttentionKernel> kernel = to.training.attention_kernel;
        to.training = from.training;
        to.training.attention_kernel = kernel;  // the compute factor's
      }
      to.plan = from.plan;
      return;
    default: return;  // a run's factor
  }
}

void take_run_factor(Factor factor, RunSpec& to, const RunSpec& from) {
  switch (factor) {
    case Factor::memory_and_layout:  // the workload: what to train, and how many replications
      to.tokens = from.tokens;
      to.replications = from.replications;
      return;
    case Factor::failures:
      to.interruptions = from.interruptions;
      to.causes = from.causes;
      to.detection_s = from.detection_s;
      to.restart_s = from.restart_s;
      to.node_repair_s = from.node_repair_s;
      to.degradations = from.degradations;
      to.step_jitter = from.step_jitter;
      return;
    case Factor::recovery:
      to.hot_spares = from.hot_spares;
      to.when_short = from.when_short;
      to.evict_degraded_after_s = from.evict_degraded_after_s;
      return;
    case Factor::checkpoints:
      to.policy = from.policy;
      to.write = from.write;
      to.persist_every_s = from.persist_every_s;
      to.storage_write_bytes_per_s = from.storage_write_bytes_per_s;
      to.storage_read_bytes_per_s = from.storage_read_bytes_per_s;
      return;
    case Factor::spot: to.spot = from.spot; return;
    case Factor::price:
      to.usd_per_gpu_hour = from.usd_per_gpu_hour;
      to.spot_usd_per_gpu_hour = from.spot_usd_per_gpu_hour;
      to.priced = from.priced;
      to.spot_priced = from.spot_priced;
      return;
    default: return;  // a step's factor
  }
}

double factorial(std::size_t n) {
  return std::tgamma(static_cast<double>(n) + 1.0);
}

std::string factor_list(const std::vector<Factor>& factors, std::size_t mask) {
  std::string list;
  for (std::size_t i = 0; i < factors.size(); ++i) {
    if (!(mask >> i & 1u)) continue;
    list += (list.empty() ? "" : ", ") + std::string(label(factors[i]));
  }
  return list;
}

}  // namespace

const char* to_string(Factor factor) {
  switch (factor) {
    case Factor::compute: return "compute";
    case Factor::hbm_bandwidth: return "hbm_bandwidth";
    case Factor::scale_up: return "scale_up";
    case Factor::host: return "host";
    case Factor::network: return "network";
    case Factor::collective_library: return "collective_library";
    case Factor::memory_and_layout: return "memory_and_layout";
    case Factor::failures: return "failures";
    case Factor::recovery: return "recovery";
    case Factor::checkpoints: return "checkpoints";
    case Factor::spot: return "spot";
    case Factor::price: return "price";
  }
  return "?";
}

const char* label(Factor factor) {
  switch (factor) {
    case Factor::compute: return "compute";
    case Factor::hbm_bandwidth: return "HBM bandwidth";
    case Factor::scale_up: return "NVLink / xGMI";
    case Factor::host: return "PCIe and host";
    case Factor::network: return "network";
    case Factor::collective_library: return "collective library";
    case Factor::memory_and_layout: return "memory, workload, layout";
    case Factor::failures: return "failures";
    case Factor::recovery: return "recovery";
    case Factor::checkpoints: return "checkpoints";
    case Factor::spot: return "spot capacity";
    case Factor::price: return "price";
  }
  return "?";
}

bool is_run_factor(Factor factor) {
  switch (factor) {
    case Factor::failures:
    case Factor::recovery:
    case Factor::checkpoints:
    case Factor::spot:
    case Factor::price: return true;
    default: return false;
  }
}

void take_factor(Factor factor, StepInputs& to, std::optional<RunSpec>& to_run,
                 const StepInputs& from, const std::optional<RunSpec>& from_run) {
  take_step_factor(factor, to, from);
  if (to_run && from_run) take_run_factor(factor, *to_run, *from_run);
}

std::vector<double> shapley_values(std::size_t players, const std::vector<double>& value) {
  const std::size_t coalitions = std::size_t{1} << players;
  if (value.size() != coalitions) {
    throw ModelError("shapley_values: " + std::to_string(value.size()) + " values for " +
                     std::to_string(players) + " players");
  }
  // The weight of a coalition of s players that player i joins: s! (n - s - 1)! / n!.
  std::vector<double> weight(players);
  for (std::size_t s = 0; s < players; ++s) {
    weight[s] = factorial(s) * factorial(players - s - 1) / factorial(players);
  }
  std::vector<double> phi(players, 0.0);
  for (std::size_t i = 0; i < players; ++i) {
    const std::size_t bit = std::size_t{1} << i;
    for (std::size_t mask = 0; mask < coalitions; ++mask) {
      if (mask & bit) continue;
      const auto size = static_cast<std::size_t>(std::popcount(mask));
      phi[i] += weight[size] * (value[mask | bit] - value[mask]);
    }
  }
  return phi;
}

Attribution attribute(const AttributionSide& baseline, const AttributionSide& variant,
                      std::uint64_t seed, const StepOptions& options) {
  Attribution out;
  out.baseline = baseline.name;
  out.variant = variant.name;
  const bool runs = baseline.run && variant.run;
  std::optional<RunSpec> base_run = runs ? baseline.run : std::nullopt;
  std::optional<RunSpec> other_run = runs ? variant.run : std::nullopt;
  if (runs) {
    // One replication count for every counterfactual, the larger: more replications change the
    // estimate, not the run, and would otherwise be attributed as a difference.
    const int replications = std::max(base_run->replications, other_run->replications);
    base_run->replications = other_run->replications = replications;
  }
  // What the simulation reads of a configuration: a factor differs only if that does. Link
  // kinds count where either side's traffic crosses them.
  std::vector<std::string> kinds = used_link_kinds(baseline.inputs);
  for (const std::string& kind : used_link_kinds(variant.inputs)) {
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) kinds.push_back(kind);
  }
  const auto same = [&](const StepInputs& a, const std::optional<RunSpec>& run_a,
                        const StepInputs& b, const std::optional<RunSpec>& run_b) {
    return simulated_part(a, kinds) == simulated_part(b, kinds) &&
           simulated_part(run_a) == simulated_part(run_b);
  };
  for (Factor factor : kFactors) {
    if (is_run_factor(factor) && !runs) continue;
    StepInputs inputs = baseline.inputs;
    std::optional<RunSpec> run = base_run;
    take_factor(factor, inputs, run, variant.inputs, other_run);
    if (!same(inputs, run, baseline.inputs, base_run)) out.factors.push_back(factor);
  }
  const std::size_t n = out.factors.size();
  const std::size_t coalitions = std::size_t{1} << n;
  // The variant's own configuration from the baseline's with every factor taken: what
  // guarantees that the factors cover every field the simulation reads.
  const auto compose = [&](std::size_t mask) {
    std::pair<StepInputs, std::optional<RunSpec>> config{baseline.inputs, base_run};
    for (std::size_t i = 0; i < n; ++i) {
      if (mask >> i & 1u) {
        take_factor(out.factors[i], config.first, config.second, variant.inputs, other_run);
      }
    }
    return config;
  };
  const auto whole = compose(coalitions - 1);
  if (!same(whole.first, whole.second, variant.inputs, other_run)) {
    throw ModelError("attribution: a field of variant " + variant.name +
                     " belongs to no factor, so its counterfactuals cannot reach it");
  }

  out.metrics = {"step_time_s"};
  if (runs) out.metrics.push_back("wall_s_mean");
  const bool priced = runs && base_run->priced && other_run->priced;
  if (priced) out.metrics.push_back("cost_usd_mean");

  std::size_t step_bits = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!is_run_factor(out.factors[i])) step_bits |= std::size_t{1} << i;
  }
  std::vector<std::size_t> step_masks;
  for (std::size_t mask = 0; mask < coalitions; ++mask) {
    if ((mask & ~step_bits) == 0) step_masks.push_back(mask);
  }
  const StepOptions untraced = options.untraced();
  // Each counterfactual writes only its own slot: the result does not depend on scheduling.
  // Coalitions that differ only in run factors share their steps, degraded and shrunk ones too.
  StepCache steps;
  std::vector<double> step_s(coalitions, 0.0);
  std::vector<std::string> failure(coalitions);
  const auto simulate_mask = [&](std::size_t mask) {
    try {
      const StepOutcome outcome = steps.simulate(compose(mask).first, untraced);
      if (outcome.simulated) {
        step_s[mask] = outcome.step.step_time_s;
      } else {
        failure[mask] = "does not fit in memory";
      }
    } catch (const ModelError& error) {
      failure[mask] = std::string("does not run: ") + error.what();
    }
  };
  // The two ends first: when either does not run there is no difference to attribute.
  for (const std::size_t end : {std::size_t{0}, step_bits}) {
    simulate_mask(end);
    if (!failure[end].empty()) {
      out.not_attributed = (end == 0 ? baseline.name : variant.name) + " " + failure[end];
      return out;
    }
  }
  tbb::parallel_for(std::size_t{1}, step_masks.size(), [&](std::size_t k) {
    if (step_masks[k] != step_bits) simulate_mask(step_masks[k]);
  });
  out.counterfactuals = step_masks.size();
  std::vector<std::vector<double>> values(out.metrics.size(), std::vector<double>(coalitions));
  for (std::size_t mask = 0; mask < coalitions; ++mask) values[0][mask] = step_s[mask & step_bits];

  if (runs) {
    std::vector<std::pair<double, double>> run_values(coalitions);
    // Its own slots: the step failures are read while these are written.
    std::vector<std::string> run_failure(coalitions);
    tbb::parallel_for(std::size_t{0}, coalitions, [&](std::size_t mask) {
      if (!failure[mask & step_bits].empty()) return;
      try {
        const auto config = compose(mask);
        const JobResult result = simulate_run_of_step(
            *config.second, config.first, step_s[mask & step_bits], untraced, seed, steps);
        run_values[mask] = {result.wall_s.mean, result.cost_usd.mean};
      } catch (const ModelError& error) {
        run_failure[mask] = std::string("does not run: ") + error.what();
      }
    });
    for (std::size_t mask = 0; mask < coalitions; ++mask) {
      if (failure[mask].empty()) failure[mask] = std::move(run_failure[mask]);
    }
    out.counterfactuals += coalitions;
    for (std::size_t mask = 0; mask < coalitions; ++mask) {
      values[1][mask] = run_values[mask].first;
      if (priced) values[2][mask] = run_values[mask].second;
    }
  }
  for (std::size_t mask = 0; mask < coalitions; ++mask) {
    if (failure[mask].empty()) continue;
    out.not_attributed = mask == 0 ? baseline.name + " " + failure[mask]
                         : mask == coalitions - 1
                             ? variant.name + " " + failure[mask]
                             : baseline.name + " with the " + factor_list(out.factors, mask) +
                                   " of " + variant.name + " " + failure[mask];
    return out;
  }
  out.parts.assign(n, std::vector<double>(out.metrics.size()));
  for (std::size_t m = 0; m < out.metrics.size(); ++m) {
    out.baseline_values.push_back(values[m].front());
    out.variant_values.push_back(values[m].back());
    const std::vector<double> phi = shapley_values(n, values[m]);
    for (std::size_t i = 0; i < n; ++i) out.parts[i][m] = phi[i];
  }
  return out;
}

}  // namespace fleetsim
