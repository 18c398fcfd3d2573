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

std::vector<CollectiveSample> benchmark_collective(const StepInputs& cluster, CollectiveOp op,
                                                   int ranks, const std::vector<double>& sizes) {
  const Topology topology = build_cluster(cluster.node, cluster.nodes, cluster.fabric);
  if (ranks < 1 || static_cast<std::size_t>(ranks) > topology.gpus().size()) {
    throw ModelError("the collective needs " + std::to_string(ranks) + " GPUs, the cluster has " +
                     std::to_string(topology.gpus().size()));
  }
  const std::vector<VertexId> members(topology.gpus().begin(), topology.gpus().begin() + ranks);
  const std::vector<double> capacity = usable_link_capacities(topology, cluster.gpu);
  const CollectiveLatency latency = collective_latency(cluster.gpu);
  const NvlsSupport nvls = nvls_support(cluster.gpu);
  std::vector<CollectiveSample> samples;
  for (const double size : sizes) {
    Engine engine;
    FlowNetwork network(engine, capacity);
    Collectives collectives(engine, network, topology, latency, nvls);
    SimTime done{};
    bool finished = false;
    collectives.run(op, members, size, [&] {
      done = engine.now();
      finished = true;
    });
    engine.run();
    if (!finished) throw ModelError(std::string(to_string(op)) + " never completed");
    CollectiveSample sample;
    sample.size_bytes = size;
    sample.algorithm = to_string(collectives.choose(op, members));
    sample.time_us = done.seconds() * 1e6;
    sample.algbw_gb_per_s = done.ns() > 0 ? size / done.seconds() / 1e9 : 0.0;
    sample.busbw_gb_per_s = sample.algbw_gb_per_s * bus_factor(op, ranks);
    samples.push_back(sample);
  }
  return samples;
}

}  // namespace fleetsim
