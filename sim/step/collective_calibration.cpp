#include "sim/step/collective_calibration.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <string_view>

#include "calibration/linear_fit.hpp"
#include "sim/engine/errors.hpp"
#include "sim/engine/text.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {
namespace {

// A fitted efficiency below this share of line rate is not a property of the link kind: the
// lowest published in the shipped profiles is PCIe's 0.59 (a P2P-disabled copy benchmark),
// NVIDIA's expectations for NVLink and InfiniBand lie at 0.77-0.96 (GTC24 S62129), and NVLS's
// reduction at 0.46-0.53 of twice the line rate (the same source, H100; Blackwell by NCCL's
// ratio). Below it the log shows a degraded system, or one the preset does not describe.
constexpr double kLeastPlausibleEfficiency = 0.4;
// Bandwidth that still grows by more than this share per doubling of the message at the log's
// largest sizes has not levelled off: the fit would read the pipeline's fill as the link's
// rate. (The shipped logs grow by 0.1-3.4% over their last doubling.)
constexpr double kMostRiseAtTheEnd = 0.05;

// The GPU a device or profile name speaks of ("NVIDIA H100 80GB HBM3", "h100-sxm-96gb":
// "h100"), or "" when it names none known; the more specific names come first.
std::string gpu_family(std::string_view name) {
  std::string squeezed;
  for (const char c : ascii_lower(name)) {
    if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) squeezed += c;
  }
  for (const char* family :
       {"gb300", "gb200", "b300", "b200", "h200", "h800", "h100", "h20", "a800", "a100", "mi355",
        "mi325", "mi300", "mi250", "l40s", "l40", "5090", "4090", "3090"}) {
    if (squeezed.find(family) != std::string::npos) return family;
  }
  return "";
}

// The log's GPUs and rank count against the cluster it is to be fitted on: a log of other GPUs
// (or another collective library: RCCL's are AMD's) or of more ranks than the cluster's fits
// nothing of the profile.
void check_log_matches(const StepInputs& cluster, const NcclLog& log, BenchmarkRanks ranks) {
  const std::string profile = gpu_family(cluster.gpu.name);
  for (const NcclLogDevice& device : log.devices) {
    const std::string ran_on = gpu_family(device.name);
    if (ran_on.empty() || profile.empty() || ran_on == profile) continue;
    throw NcclLogError(log.file, 0,
                       "the log ran on " + device.name + ", and the cluster's GPU profile is " +
                           cluster.gpu.name + " (node " + cluster.node.name + ")",
                       "give --node a preset of that GPU, or --gpu its profile");
  }
  const int available = resolve(cluster, {0, ranks.per_node}).ranks;
  const int wanted = ranks.ranks;
  if (wanted > available) {
    throw NcclLogError(log.file, 0,
                       "the log has " + std::to_string(wanted) + " ranks, and " +
                           std::to_string(cluster.nodes) + " x " + cluster.node.name + " give " +
                           std::to_string(available) + " GPUs",
                       "add --nodes (and -g for fewer GPUs a node), or --ranks");
  }
}

// Refuses a log whose out-of-place bus bandwidth still grows by more than kMostRiseAtTheEnd per
// doubling between its two largest rows of the fit.
void check_levelled_off(const NcclLog& log, double min_bytes) {
  std::vector<const NcclLogRow*> rows;
  for (const NcclLogRow& row : log.rows) {
    if (row.size_bytes >= min_bytes && row.out_of_place) rows.push_back(&row);
  }
  std::sort(rows.begin(), rows.end(),
            [](const auto* a, const auto* b) { return a->size_bytes < b->size_bytes; });
  if (rows.size() < 2) return;
  const NcclLogRow& before = *rows[rows.size() - 2];
  const NcclLogRow& last = *rows.back();
  const double doublings = std::log2(last.size_bytes / before.size_bytes);
  const double growth = last.out_of_place->algbw_gb_per_s / before.out_of_place->algbw_gb_per_s;
  if (doublings > 0 && std::pow(growth, 1 / doublings) - 1 > kMostRiseAtTheEnd) {
    char text[160];
    std::snprintf(text, sizeof text,
                  "the bandwidth still rises %.0f%% a doubling at the largest message (%.0f B): "
                  "the log stops before it levels off",
                  100 * (std::pow(growth, 1 / doublings) - 1), last.size_bytes);
    throw NcclLogError(log.file, last.line, text,
                       "run nccl-tests to larger messages (-e), or fit a log that does");
  }
}

// The link kind whose links carry the most bytes per unit of capacity in a run of `op` of the
// largest size: the bottleneck whose efficiency the log can tell.
std::string bottleneck_kind(const StepInputs& cluster, CollectiveOp op, BenchmarkRanks ranks,
                            double size, CollectiveAlgorithm algorithm) {
  const Topology topology = build_cluster(cluster.node, cluster.nodes, cluster.fabric);
  const std::vector<VertexId> members = benchmark_members(topology, cluster, ranks);
  Engine engine;
  FlowNetwork network(engine, usable_link_capacities(topology, cluster.gpu));
  Collectives collectives(engine, network, topology, cluster.gpu.collectives,
                          gpu_link_modes(cluster.gpu));
  collectives.run_with(algorithm, op, members, size, [] {});
  engine.run();
  std::map<std::string, double> load_by_kind;
  for (LinkId l = 0; l < topology.link_count(); ++l) {
    const double load = network.link_bytes()[l] / network.capacity(l);
    double& kind_load = load_by_kind[to_string(topology.link(l).kind)];
    kind_load = std::max(kind_load, load);
  }
  std::string busiest;
  double most = -1;
  for (const auto& [kind, load] : load_by_kind) {  // ordered by name: ties resolve the same way
    if (load > most) {
      most = load;
      busiest = kind;
    }
  }
  return busiest;
}

// The library's cost tables with every latency at zero: the bandwidth terms (protocol
// bandwidths, tree efficiency) stay as the profile has them.
CollectiveCosts without_latency(CollectiveCosts costs) {
  for (auto* table : {&costs.ring, &costs.tree}) {
    for (ProtocolCost& cost : *table) {
      cost.base = cost.nvlink_step = cost.pcie_step = cost.network_step = SimTime{};
    }
  }
  return costs;
}

}  // namespace

CollectiveOp collective_op_of_log(const NcclLog& log) {
  static const std::map<std::string, CollectiveOp> ops{
      {"all_reduce", CollectiveOp::all_reduce}, {"reduce_scatter", CollectiveOp::reduce_scatter},
      {"all_gather", CollectiveOp::all_gather}, {"alltoall", CollectiveOp::all_to_all},
      {"broadcast", CollectiveOp::broadcast},   {"sendrecv", CollectiveOp::send_recv}};
  const auto found = ops.find(log.op);
  if (found == ops.end()) {
    throw ModelError(log.file + ": the simulator does not model '" + log.op + "'");
  }
  return found->second;
}

CollectiveFit fit_collective_log(const StepInputs& cluster, const NcclLog& log,
                                 BenchmarkRanks ranks, std::optional<CollectiveAlgorithm> forced,
                                 double min_bytes) {
  const CollectiveOp op = collective_op_of_log(log);
  std::vector<double> sizes, measured_us;
  for (const NcclLogRow& row : log.rows) {
    if (row.size_bytes < min_bytes || !row.out_of_place) continue;
    sizes.push_back(row.size_bytes);
    measured_us.push_back(row.out_of_place->time_us);
  }
  if (sizes.size() < 3) {
    throw ModelError(log.file +
                     ": a fit of latency and bandwidth with an error estimate needs "
                     "at least three rows (lower the minimum size?)");
  }
  check_log_matches(cluster, log, ranks);
  check_levelled_off(log, min_bytes);
  const double largest = *std::max_element(sizes.begin(), sizes.end());

  // The algorithm as the current profile would choose it for the largest size, and the link
  // kind that bounds it there.
  const CollectiveAlgorithm algorithm =
      benchmark_collective(cluster, op, ranks, {largest}, forced).front().algorithm;
  CollectiveFit fit;
  fit.algorithm = to_string(algorithm);
  fit.ranks = resolve(cluster, ranks).ranks;

  // Bandwidth-only runs: every latency at 0, the other efficiencies as the profile has them.
  StepInputs trial = cluster;
  trial.gpu.collectives = without_latency(cluster.gpu.collectives);
  const std::string kind = bottleneck_kind(cluster, op, ranks, largest, algorithm);
  if (kind == "host_memory") {
    throw ModelError(log.file +
                     ": host memory bounds this run; its efficiency is the node preset's "
                     "host_memory_efficiency, which a fit does not set yet");
  }
  const bool uses_nvls =
      algorithm == CollectiveAlgorithm::nvls || algorithm == CollectiveAlgorithm::nvls_tree;
  double* efficiency = nullptr;
  const bool gpu_link = kind == "nvlink" || kind == "xgmi";
  if (uses_nvls && kind == "nvlink") {
    // The switch's reduction paces NVLS, at its own efficiency, where the ports do not.
    fit.parameter = "nvls_efficiency";
    efficiency = &trial.gpu.nvls_efficiency->value;  // NVLS runs only where the profile has it
    *efficiency = 1;
  } else if ((op == CollectiveOp::send_recv || op == CollectiveOp::all_to_all) && gpu_link) {
    // Sends between peers of one domain (send/recv, all-to-all) run at the point-to-point
    // efficiency.
    fit.parameter = "p2p_efficiency";
    trial.gpu.p2p_efficiency = Calibrated{1.0, 0.0, "fit"};
    efficiency = &trial.gpu.p2p_efficiency->value;
  } else {
    fit.parameter = "link_efficiency." + kind;
    efficiency = &trial.gpu.link_efficiency[kind].value;
    *efficiency = 1;
    // At efficiency 1 another kind may bound the run instead; the fit would then measure that
    // kind's share of time, not this one's efficiency.
    if (bottleneck_kind(trial, op, ranks, largest, algorithm) != kind) {
      throw ModelError(log.file + ": " + kind +
                       " links bound this run only because of their efficiency; the log "
                       "cannot tell it apart from the next slowest link kind");
    }
  }

  // Where the fitted links set the time at every efficiency, a bandwidth-only run at e takes
  // x/e, and one fit of y = L + s * x at e = 1 gives e = 1/s. Where other links set it at e = 1
  // (NVLS-tree: with NVLink at full rate the network stage is the slower one), the time there
  // is not x/e: the fit is repeated at e <- e / s until s = 1 (times are whole nanoseconds, so
  // it also stops when e no longer moves).
  constexpr int kMaxIterations = 50;
  std::vector<double> bandwidth_us;
  LinearFit line;
  for (int iteration = 0;; ++iteration) {
    bandwidth_us.clear();
    for (const CollectiveSample& sample : benchmark_collective(trial, op, ranks, sizes, algorithm))
      bandwidth_us.push_back(sample.time_us);
    line = fit_relative_least_squares(bandwidth_us, measured_us);
    if (!(line.slope > 0)) throw ModelError(log.file + ": the fit gives no positive efficiency");
    const double next = *efficiency / line.slope;
    const bool converged =
        std::abs(line.slope - 1) < 1e-6 || std::abs(next - *efficiency) < 1e-9 * *efficiency;
    if (converged) break;
    if (iteration == kMaxIterations) {
      throw ModelError(log.file + ": the fit of " + fit.parameter +
                       " does not converge: other links bound the run at every efficiency");
    }
    *efficiency = next;
  }
  // NVLS on few GPUs fills its ports before the switch's reduction binds: then a faster
  // reduction would not change the run, and the log says nothing about nvls_efficiency. The
  // fit's last runs are at the fitted efficiency.
  if (fit.parameter == "nvls_efficiency") {
    StepInputs faster = trial;
    faster.gpu.nvls_efficiency->value *= 1.1;
    const double faster_us =
        benchmark_collective(faster, op, ranks, {largest}, algorithm).front().time_us;
    const auto at_largest = std::max_element(sizes.begin(), sizes.end()) - sizes.begin();
    if (faster_us >= bandwidth_us[static_cast<std::size_t>(at_largest)] * (1 - 1e-6)) {
      throw ModelError(log.file +
                       ": the NVLink ports, not the switch's reduction, bound this NVLS run; "
                       "the log cannot tell nvls_efficiency (a ring log of these GPUs fits "
                       "link_efficiency.nvlink)");
    }
  }
  // At the fitted efficiency the fitted links must bound the run, or the log says nothing
  // about them.
  const std::string bound_by = bottleneck_kind(trial, op, ranks, largest, algorithm);
  if (bound_by != kind) {
    throw ModelError(log.file + ": at the fitted " + fit.parameter + " of " +
                     std::to_string(*efficiency) + " the run is bound by " + bound_by +
                     " links, not " + kind + "; the log cannot tell the efficiency");
  }
  if (*efficiency < kLeastPlausibleEfficiency || *efficiency > 1) {
    char text[200];
    std::snprintf(text, sizeof text,
                  "the fit gives %s = %.3f, outside the %.2f-1 a link of its kind delivers: the "
                  "log is of a degraded system or of one that %s does not describe",
                  fit.parameter.c_str(), *efficiency, kLeastPlausibleEfficiency,
                  cluster.node.name.c_str());
    throw NcclLogError(log.file, 0, text,
                       "check the log's system against the preset (GPUs, links, NICs), or "
                       "leave this fit out");
  }
  fit.efficiency = *efficiency;
  // The fitted links bound the run, so near the fixed point the time scales as 1/e and
  // sigma_e = e * sigma_s (s = 1).
  fit.efficiency_sigma = fit.efficiency * line.slope_sigma;
  fit.latency_us = line.intercept;
  fit.latency_sigma_us = line.intercept_sigma;
  std::vector<double> abs_errors;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const double fitted = line.intercept + line.slope * bandwidth_us[i];
    fit.points.push_back({sizes[i], measured_us[i], fitted, line.relative_errors[i]});
    abs_errors.push_back(std::abs(line.relative_errors[i]));
  }
  fit.median_abs_error = median(abs_errors);
  fit.max_abs_error = *std::max_element(abs_errors.begin(), abs_errors.end());
  return fit;
}

}  // namespace fleetsim
