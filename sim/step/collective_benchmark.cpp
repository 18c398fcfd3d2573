#include "sim/step/collective_benchmark.hpp"

#include <cmath>
#include <string>

#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/network/flow_network.hpp"
#include "sim/step/step_executor.hpp"

namespace fleetsim {

std::vector<double> nccl_tests_sizes(double min_bytes, double max_bytes, double factor,
                                     double element_bytes) {
  if (!(min_bytes > 0) || max_bytes < min_bytes || !(factor > 1)) {
    throw ModelError("sizes need 0 < min <= max and a factor > 1");
  }
  std::vector<double> sizes;
  for (double size = min_bytes; size <= max_bytes * (1 + 1e-12); size *= factor) {
    sizes.push_back(std::max(element_bytes, std::floor(size / element_bytes) * element_bytes));
  }
  return sizes;
}

BenchmarkRanks resolve(const StepInputs& cluster, BenchmarkRanks ranks) {
  if (ranks.per_node < 0 || ranks.per_node > cluster.node.gpus) {
    throw ModelError("expected 1 to " + std::to_string(cluster.node.gpus) + " GPUs a node (" +
                     cluster.node.name + "), got " + std::to_string(ranks.per_node));
  }
  const int per_node = ranks.per_node > 0 ? ranks.per_node : cluster.node.gpus;
  const int available = cluster.nodes * per_node;
  if (ranks.ranks < 0 || ranks.ranks > available) {
    throw ModelError("expected 1 to " + std::to_string(available) + " ranks (" +
                     std::to_string(cluster.nodes) + " nodes, " + std::to_string(per_node) +
                     " GPUs each), got " + std::to_string(ranks.ranks));
  }
  return {ranks.ranks > 0 ? ranks.ranks : available, per_node};
}

std::vector<VertexId> benchmark_members(const Topology& topology, const StepInputs& cluster,
                                        BenchmarkRanks ranks) {
  const BenchmarkRanks picked = resolve(cluster, ranks);
  std::vector<VertexId> members;
  for (int node = 0; node < cluster.nodes; ++node) {
    for (int index = 0; index < picked.per_node; ++index) {
      members.push_back(topology.gpus().at(static_cast<std::size_t>(node) * cluster.node.gpus +
                                           static_cast<std::size_t>(index)));
    }
  }
  members.resize(static_cast<std::size_t>(picked.ranks));
  return members;
}

std::vector<CollectiveSample> benchmark_collective(const StepInputs& cluster, CollectiveOp op,
                                                   BenchmarkRanks ranks,
                                                   const std::vector<double>& sizes,
                                                   std::optional<CollectiveAlgorithm> forced) {
  const Topology topology = build_cluster(cluster.node, cluster.nodes, cluster.fabric);
  const std::vector<VertexId> members = benchmark_members(topology, cluster, ranks);
  const int count = static_cast<int>(members.size());
  // One network for the whole sweep, idle between sizes (each runs to completion before the
  // next starts), so routes and rings are computed once.
  Engine engine;
  FlowNetwork network(engine, usable_link_capacities(topology, cluster.gpu));
  Collectives collectives(engine, network, topology, cluster.gpu.collectives,
                          gpu_link_modes(cluster.gpu));
  std::vector<CollectiveSample> samples;
  for (const double size : sizes) {
    const SimTime start = engine.now();
    SimTime done{};
    bool finished = false;
    auto on_done = [&] {
      done = engine.now();
      finished = true;
    };
    const CollectiveChoice choice = collectives.choose(op, members, size, forced);
    collectives.run_with(choice, op, members, size, on_done);
    engine.run();
    if (!finished) throw ModelError(std::string(to_string(op)) + " never completed");
    CollectiveSample sample;
    sample.size_bytes = size;
    sample.algorithm = choice.algorithm;
    sample.protocol = choice.protocol;
    const double seconds = (done - start).seconds();
    sample.time_us = seconds * 1e6;
    sample.algbw_gb_per_s = seconds > 0 ? size / seconds / 1e9 : 0.0;
    sample.busbw_gb_per_s = sample.algbw_gb_per_s * bus_factor(op, count);
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace fleetsim
