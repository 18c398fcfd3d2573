#include "tools/fleetsim/collective_command.hpp"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <map>
#include <stdexcept>

#include "sim/engine/errors.hpp"
#include "sim/report/report.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/collective_benchmark.hpp"

namespace fleetsim {
namespace {

CollectiveOp parse_op(const std::string& name) {
  static const std::map<std::string, CollectiveOp> ops{
      {"all_reduce", CollectiveOp::all_reduce}, {"reduce_scatter", CollectiveOp::reduce_scatter},
      {"all_gather", CollectiveOp::all_gather}, {"all_to_all", CollectiveOp::all_to_all},
      {"alltoall", CollectiveOp::all_to_all},   {"broadcast", CollectiveOp::broadcast},
      {"send_recv", CollectiveOp::send_recv},   {"sendrecv", CollectiveOp::send_recv}};
  const auto found = ops.find(name);
  if (found == ops.end()) {
    throw ScenarioError("(command line)", 0, 0, "--op", "unknown collective '" + name + "'",
                        "one of all_reduce, reduce_scatter, all_gather, all_to_all, broadcast, "
                        "send_recv");
  }
  return found->second;
}

// nccl-tests prints times with fewer decimals as they grow (src/common.cu).
std::string format_time_us(double us) {
  char text[32];
  std::snprintf(text, sizeof text, us >= 10000 ? "%7.0f" : us >= 100 ? "%7.1f" : "%7.2f", us);
  return text;
}

}  // namespace

std::optional<CollectiveAlgorithm> parse_algorithm(const std::string& name) {
  if (name.empty()) return std::nullopt;
  for (const auto algorithm :
       {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree, CollectiveAlgorithm::nvls,
        CollectiveAlgorithm::nvls_tree, CollectiveAlgorithm::hierarchical,
        CollectiveAlgorithm::direct, CollectiveAlgorithm::chain, CollectiveAlgorithm::pairs}) {
    if (name == to_string(algorithm)) return algorithm;
  }
  throw ScenarioError(
      "(command line)", 0, 0, "--algo", "unknown algorithm '" + name + "'",
      "one of ring, tree, nvls, nvls_tree, hierarchical (all-reduce), direct, chain, "
      "pairs");
}

double parse_nccl_tests_size(const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  const std::string suffix = text.substr(used);
  const std::map<std::string, double> multipliers{
      {"", 1}, {"K", 1024}, {"M", 1024.0 * 1024}, {"G", 1024.0 * 1024 * 1024}};
  const auto multiplier = multipliers.find(suffix);
  if (used == 0 || multiplier == multipliers.end() || !(value > 0)) {
    throw ScenarioError("(command line)", 0, 0, "size",
                        "expected a size like 8, 128M or 8G, got '" + text + "'",
                        "nccl-tests syntax: K, M and G are powers of 1024");
  }
  return value * multiplier->second;
}

void run_collective_command(const CollectiveOptions& options) {
  if (options.node.empty()) {
    throw ScenarioError("(command line)", 0, 0, "--node", "a node preset is required",
                        "see `fleetsim list` for the presets");
  }
  StepInputs cluster =
      load_cluster(DataPaths{options.data_dir}, options.node, options.nodes, options.gpu);
  options.fabric.apply(cluster.fabric);
  const CollectiveOp op = parse_op(options.op);
  const int ranks = options.ranks > 0 ? options.ranks : cluster.nodes * cluster.node.gpus;
  const std::vector<double> sizes =
      nccl_tests_sizes(parse_nccl_tests_size(options.min_bytes),
                       parse_nccl_tests_size(options.max_bytes), options.factor);
  if (options.seeds < 1) {
    throw ScenarioError("(command line)", 0, 0, "--seeds", "expected at least 1 seed",
                        "hash routing runs seeds 1..N");
  }
  const bool hashed = cluster.fabric.routing == FabricRouting::hash;
  if (options.seeds > 1 && !hashed) {
    throw ScenarioError("(command line)", 0, 0, "--seeds",
                        "more than one seed draws nothing under adaptive routing",
                        "add --routing hash, or leave --seeds out");
  }
  const int seeds = options.seeds;
  std::vector<std::vector<CollectiveSample>> runs;  // [seed][size]
  for (int seed = 1; seed <= seeds; ++seed) {
    cluster.fabric.hash_seed = static_cast<std::uint64_t>(seed);
    runs.push_back(
        benchmark_collective(cluster, op, ranks, sizes, parse_algorithm(options.algorithm)));
  }
  // Each row: the run of median time over the seeds (the upper median for an even count).
  std::vector<CollectiveSample> samples;
  std::vector<double> largest_busbw;
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    std::vector<CollectiveSample> row;
    for (const auto& run : runs) row.push_back(run[i]);
    std::stable_sort(row.begin(), row.end(),
                     [](const auto& a, const auto& b) { return a.time_us < b.time_us; });
    samples.push_back(row[row.size() / 2]);
    if (i + 1 == sizes.size()) {
      for (const auto& sample : row) largest_busbw.push_back(sample.busbw_gb_per_s);
    }
  }

  std::printf("# fleetsim %s: %s_perf simulated on %d GPUs of %d x %s (%s)\n", FLEETSIM_VERSION,
              to_string(op), ranks, cluster.nodes, cluster.node.name.c_str(),
              cluster.gpu.name.c_str());
  // The algorithm and protocol of each run of sizes, as NCCL_DEBUG=INFO would tell (the table
  // has no column for them).
  auto same_choice = [&](std::size_t a, std::size_t b) {
    return samples[a].algorithm == samples[b].algorithm &&
           samples[a].protocol == samples[b].protocol;
  };
  for (std::size_t i = 0; i < samples.size();) {
    std::size_t j = i;
    while (j + 1 < samples.size() && same_choice(j + 1, i)) ++j;
    std::printf("# algorithm %s/%s for %.0f .. %.0f B\n", to_string(samples[i].algorithm),
                to_string(samples[i].protocol), samples[i].size_bytes, samples[j].size_bytes);
    i = j + 1;
  }
  std::printf("#\n");
  std::printf("#%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop",
              "root", "time", "algbw", "busbw", "#wrong");
  std::printf("#%12s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "",
              "(us)", "(GB/s)", "(GB/s)", "");
  const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
  double busbw_sum = 0;
  for (const CollectiveSample& sample : samples) {
    std::printf(" %12.0f  %12.0f  %8s  %6s  %6d  %s  %6.2f  %6.2f  %6s\n", sample.size_bytes,
                sample.size_bytes / 4, "float", reduces ? "sum" : "none", -1,
                format_time_us(sample.time_us).c_str(), sample.algbw_gb_per_s,
                sample.busbw_gb_per_s, "N/A");
    busbw_sum += sample.busbw_gb_per_s;
  }
  std::printf("# Avg bus bandwidth    : %g\n#\n", busbw_sum / static_cast<double>(samples.size()));
  if (hashed) {
    // largest_busbw is sorted by time, so its busbw falls from first to last.
    std::printf(
        "# hash routing over %d seeds, busbw at %.0f B: min %.2f, median %.2f, max %.2f\n#\n",
        seeds, sizes.back(), largest_busbw.back(), largest_busbw[largest_busbw.size() / 2],
        largest_busbw.front());
  }
  if (!options.output.empty()) {
    write_collective_hdf5(CollectiveReport{FLEETSIM_VERSION, cluster.node.name, cluster.nodes,
                                           cluster.gpu.name, to_string(op), ranks, samples},
                          options.output);
  }
}

}  // namespace fleetsim
