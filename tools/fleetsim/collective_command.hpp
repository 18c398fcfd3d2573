// `fleetsim collective`: a simulated nccl-tests run, printed as nccl-tests prints it.
#pragma once

#include <optional>
#include <string>

#include "sim/collectives/collectives.hpp"
#include "tools/fleetsim/fabric_overrides.hpp"

namespace fleetsim {

struct CollectiveOptions {
  std::string data_dir;
  std::string node;
  int nodes = 1;
  std::string gpu;  // GPU profile override; empty: the node's own
  std::string op = "all_reduce";
  std::string algorithm;  // ring, tree, nvls, ...; empty: the tuner's choice
  int ranks = 0;          // 0: every GPU of the cluster
  std::string min_bytes = "8";
  std::string max_bytes = "8G";
  double factor = 2;
  std::string output;  // HDF5 file to write the table to; empty: none
  FabricOverrides fabric;
  int seeds = 1;  // hash routing: seeds 1..seeds, each row the median run, the spread summarised
};

// Prints the table to stdout; throws ScenarioError / ModelError on bad input or models.
void run_collective_command(const CollectiveOptions& options);

// nccl-tests size syntax: a number with an optional K, M or G suffix (powers of 1024).
double parse_nccl_tests_size(const std::string& text);

// An algorithm name as `--algo` takes it; empty: none forced.
std::optional<CollectiveAlgorithm> parse_algorithm(const std::string& name);

}  // namespace fleetsim
