// `fleetsim collective`: a simulated nccl-tests run, printed as nccl-tests prints it.
#pragma once

#include <optional>
#include <string>

#include "sim/collectives/collectives.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/step_inputs.hpp"
#include "tools/fleetsim/fabric_overrides.hpp"

namespace fleetsim {

struct CollectiveOptions {
  std::string data_dir;
  std::string node;
  int nodes = 1;
  std::string gpu;  // GPU profile override; empty: the node's own
  std::string op = "all_reduce";
  std::string algorithm;  // ring, tree, nvls, ...; empty: the tuner's choice
  int ranks = 0;          // 0: every GPU taking part
  int gpus_per_node = 0;  // GPUs of each node taking part (nccl-tests' -g); 0: all
  std::string min_bytes = "8";
  std::string max_bytes = "8G";
  double factor = 2;
  std::string output;  // HDF5 file to write the table to; empty: none
  bool csv = false;    // print CSV, a line per size, instead of nccl-tests' table
  FabricOverrides fabric;
  int seeds = 1;  // hash routing: seeds 1..seeds, each row the median run, the spread summarised
};

// Prints the table to stdout in nccl-tests' layout (src/util.cu at NCCL_TESTS_VERSION 2.19.6:
// its header and device lines, the out-of-place and in-place column groups, the summary lines),
// with fleetsim's own lines as '#' comments; throws ScenarioError / ModelError on bad input or
// models.
void run_collective_command(const CollectiveOptions& options);

// -g and --ranks resolved on the cluster (benchmark_collective's resolve); throws ScenarioError
// for a count the cluster cannot give.
BenchmarkRanks resolve_command_line_ranks(const StepInputs& cluster, int ranks, int gpus_per_node);

// nccl-tests size syntax: a number with an optional K, M or G suffix (powers of 1024).
double parse_nccl_tests_size(const std::string& text);

// An algorithm name as `--algo` takes it; empty: none forced.
std::optional<CollectiveAlgorithm> parse_algorithm(const std::string& name);

}  // namespace fleetsim
