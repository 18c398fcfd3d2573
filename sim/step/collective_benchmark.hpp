// A simulated nccl-tests run: one collective at a time over a range of message sizes, timed on
// the topology with the GPU profile's link efficiencies, reported in nccl-tests' terms (size,
// count, time, algbw = size / time, busbw = algbw x the bus factor of doc/PERFORMANCE.md), so the
// table can be put beside a measured log.
#pragma once

#include <optional>
#include <vector>

#include "sim/collectives/collectives.hpp"
#include "sim/step/step_inputs.hpp"
#include "topology/collective_op.hpp"

namespace fleetsim {

struct CollectiveSample {
  double size_bytes = 0;  // nccl-tests S
  CollectiveAlgorithm algorithm = CollectiveAlgorithm::ring;
  Protocol protocol = Protocol::simple;
  double time_us = 0;
  double algbw_gb_per_s = 0;
  double busbw_gb_per_s = 0;
};

// The sizes nccl-tests runs for -b min -e max -f factor (bytes, rounded down to whole elements
// of `element_bytes`, as nccl-tests does).
std::vector<double> nccl_tests_sizes(double min_bytes, double max_bytes, double factor,
                                     double element_bytes = 4);

// The GPUs an nccl-tests run takes, in rank order: the first `per_node` of each node (0: every
// one; nccl-tests' -g, with one process a node), and of those the first `ranks` (0: all).
struct BenchmarkRanks {
  int ranks = 0;
  int per_node = 0;
};
// `ranks` with its zeros resolved on `cluster`: the GPUs it takes of each node and in all.
// Throws ModelError for a negative count or more GPUs than the cluster gives.
BenchmarkRanks resolve(const StepInputs& cluster, BenchmarkRanks ranks);

// The GPUs of `topology` (built of `cluster`) that `ranks` picks, in rank order. Throws
// ModelError when the cluster has too few.
std::vector<VertexId> benchmark_members(const Topology& topology, const StepInputs& cluster,
                                        BenchmarkRanks ranks);

// Each size is simulated alone on an idle cluster, on the GPUs `ranks` picks; the algorithm is
// the tuner's unless one is forced (as NCCL_ALGO does). Throws ModelError when the cluster has
// fewer GPUs or the forced algorithm cannot run the op.
std::vector<CollectiveSample> benchmark_collective(
    const StepInputs& cluster, CollectiveOp op, BenchmarkRanks ranks,
    const std::vector<double>& sizes, std::optional<CollectiveAlgorithm> forced = std::nullopt);
// The first `ranks` GPUs in rank order.
inline std::vector<CollectiveSample> benchmark_collective(
    const StepInputs& cluster, CollectiveOp op, int ranks, const std::vector<double>& sizes,
    std::optional<CollectiveAlgorithm> forced = std::nullopt) {
  return benchmark_collective(cluster, op, BenchmarkRanks{ranks, 0}, sizes, forced);
}

}  // namespace fleetsim
