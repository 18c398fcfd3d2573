#include "tools/fleetsim/collective_command.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "sim/engine/errors.hpp"
#include "sim/report/report.hpp"
#include "sim/report/summary_table.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "tools/fleetsim/progress.hpp"

namespace fleetsim {
namespace {

// A sweep's bounds, past which a command line is a mistake rather than a measurement: a
// message of a terabyte, more rows than a table is read in, more hash seeds than a spread
// needs (each seed replays every size).
constexpr double kLargestMessage = 1024.0 * 1024 * 1024 * 1024;
constexpr int kMostRows = 1000;
constexpr int kMostSeeds = 1000;

// An op by its name or by its nccl-tests program's (all_reduce_perf).
CollectiveOp parse_op(std::string name) {
  if (name.ends_with("_perf")) name.resize(name.size() - 5);
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

// A number in `width` characters with as many of two decimals as fit, as nccl-tests prints
// times and bandwidths (getFloatStr in src/util.cu).
std::string nccl_tests_number(double value, int width) {
  char text[32];
  for (const char* format : {"%*.2f", "%*.1f", "%*.0f"}) {
    if (std::snprintf(text, sizeof text, format, width, value) <= width) return text;
  }
  std::snprintf(text, sizeof text, width >= 7 ? "%*.1e" : "%*.0e", width, value);
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

BenchmarkRanks resolve_command_line_ranks(const StepInputs& cluster, int ranks, int gpus_per_node) {
  try {
    return resolve(cluster, {ranks, gpus_per_node});
  } catch (const ModelError& error) {
    throw ScenarioError("(command line)", 0, 0, "-g / --ranks", error.what(),
                        "leave them out for every GPU of every node");
  }
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

// The table as nccl-tests prints it (src/util.cu at NCCL_TESTS_VERSION 2.19.6), with fleetsim's
// own lines as '#' comments: each row's algorithm and protocol, and under hash routing the
// spread of the largest size's bus bandwidth over the seeds (`largest_busbw`, by time).
void print_nccl_tests_table(const CollectiveOptions& options, const StepInputs& cluster,
                            CollectiveOp op, const BenchmarkRanks& picked,
                            const std::vector<double>& sizes,
                            const std::vector<CollectiveSample>& samples,
                            const std::vector<double>& largest_busbw) {
  const int per_node = picked.per_node;
  const int ranks = picked.ranks;
  const int seeds = options.seeds;
  const bool hashed = cluster.fabric.routing == FabricRouting::hash;
  const bool reduces = op == CollectiveOp::all_reduce || op == CollectiveOp::reduce_scatter;
  const std::string program = std::string(to_string(op)) + "_perf";
  std::printf("# fleetsim %s: %s simulated on %d GPUs of %d x %s (%s), in nccl-tests' layout\n",
              FLEETSIM_VERSION, program.c_str(), ranks, cluster.nodes, cluster.node.name.c_str(),
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
    std::printf("# fleetsim: algorithm %s/%s for %.0f .. %.0f B\n", to_string(samples[i].algorithm),
                to_string(samples[i].protocol), samples[i].size_bytes, samples[j].size_bytes);
    i = j + 1;
  }
  if (hashed) {
    // largest_busbw is sorted by time, so its busbw falls from first to last.
    std::printf(
        "# fleetsim: hash routing over %d seeds, busbw at %.0f B: min %.2f, median %.2f, max "
        "%.2f\n",
        seeds, sizes.back(), largest_busbw.back(), largest_busbw[largest_busbw.size() / 2],
        largest_busbw.front());
  }
  // One process a node, nGpus of its GPUs each; one timed iteration, nothing to validate.
  std::printf("# Collective test starting: %s\n", program.c_str());
  std::printf(
      "# nThread 1 nGpus %d minBytes %.0f maxBytes %.0f step: %g(factor) warmup iters: 0 iters: "
      "1 agg iters: 1 validation: 0 graph: 0 unalign: 0\n",
      std::min(per_node, ranks), sizes.front(), sizes.back(), options.factor);
  std::printf("#\n# Using devices\n");
  for (int rank = 0; rank < ranks; ++rank) {
    const int node = rank / per_node;
    std::printf("#  Rank %2d Group %2d Pid %6d on %10s device %2d [%04x:%02x:%02x] %s\n", rank, 0,
                node, ("node" + std::to_string(node)).c_str(), rank % per_node, 0, 0, 0,
                cluster.gpu.name.c_str());
  }
  std::printf("#\n");
  std::printf(
      "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place    "
      "      \n",
      "", "", "", "", "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "size",
              "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw",
              "busbw", "#wrong", 0, "");
  std::printf("# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s %*s\n", "(B)",
              "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)",
              "", 0, "");
  double busbw_sum = 0;
  for (const CollectiveSample& sample : samples) {
    std::printf("%12.0f  %12.0f  %8s  %6s  %6d", sample.size_bytes, sample.size_bytes / 4, "float",
                reduces ? "sum" : "none", -1);
    // The simulation makes no difference between out-of-place and in-place: both alike.
    for (int side = 0; side < 2; ++side) {
      std::printf("  %7s  %6s  %6s    N/A", nccl_tests_number(sample.time_us, 7).c_str(),
                  nccl_tests_number(sample.algbw_gb_per_s, 6).c_str(),
                  nccl_tests_number(sample.busbw_gb_per_s, 6).c_str());
    }
    std::printf("\n");
    busbw_sum += sample.busbw_gb_per_s;
  }
  std::printf("# %-20s : %d %s\n", "Out of bounds values", 0, "OK");
  std::printf("# %-20s : %g %s\n", "Avg bus bandwidth",
              busbw_sum / static_cast<double>(samples.size()), "");
  std::printf("#\n# Collective test concluded: %s\n", program.c_str());
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
  const BenchmarkRanks picked =
      resolve_command_line_ranks(cluster, options.ranks, options.gpus_per_node);
  const int ranks = picked.ranks;
  const double min_bytes = parse_nccl_tests_size(options.min_bytes);
  const double max_bytes = parse_nccl_tests_size(options.max_bytes);
  if (max_bytes > kLargestMessage) {
    throw ScenarioError("(command line)", 0, 0, "-e / --max",
                        "expected a message of at most 1024G, got '" + options.max_bytes + "'",
                        "nccl-tests runs go up to a few GB: -e 8G");
  }
  if (max_bytes < min_bytes) {
    throw ScenarioError("(command line)", 0, 0, "-b / --min",
                        "the smallest size '" + options.min_bytes + "' is above the largest '" +
                            options.max_bytes + "'",
                        "-b 8 -e 8G runs 8 bytes to 8 GiB");
  }
  // Sizes from min to max, each `factor` times the one before: at most kMostRows of them.
  const double rows =
      options.factor > 1 ? std::log(max_bytes / min_bytes) / std::log(options.factor) : 0.0;
  if (!(options.factor > 1) || !(rows < kMostRows)) {
    std::ostringstream factor;
    factor << std::setprecision(12) << options.factor;
    throw ScenarioError("(command line)", 0, 0, "-f / --factor",
                        "expected a factor above 1 that reaches the largest size in at most " +
                            std::to_string(kMostRows) + " rows, got " + factor.str(),
                        "nccl-tests doubles the size each row: -f 2");
  }
  const std::vector<double> sizes = nccl_tests_sizes(min_bytes, max_bytes, options.factor);
  if (options.seeds < 1 || options.seeds > kMostSeeds) {
    throw ScenarioError("(command line)", 0, 0, "--seeds",
                        "expected 1 to " + std::to_string(kMostSeeds) + " seeds, got " +
                            std::to_string(options.seeds),
                        "hash routing runs seeds 1..N: 10 show the spread");
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
        benchmark_collective(cluster, op, picked, sizes, parse_algorithm(options.algorithm)));
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

  const CollectiveReport report{FLEETSIM_VERSION, cluster.node.name, cluster.nodes,
                                cluster.gpu.name, to_string(op),     ranks,
                                samples};
  if (options.csv) {
    std::fputs(render_collective_csv(report).c_str(), stdout);
  } else {
    print_nccl_tests_table(options, cluster, op, picked, sizes, samples, largest_busbw);
  }
  if (!options.output.empty()) {
    const OutputLock lock({options.output}, say_waiting_for);
    write_collective_hdf5(report, options.output);
  }
}

}  // namespace fleetsim
