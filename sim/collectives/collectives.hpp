// Collectives as flows on the topology.
//
// A ring collective over p ranks runs on `channels` channels; each channel is ONE flow over all
// the links of all its hops (rank i -> rank i+1 for every i), so it moves at the pace of its
// slowest hop, as a pipelined ring does, and shares links max-min fairly with other traffic.
// Each channel carries factor * S / channels bytes, where S is the nccl-tests message size and
// factor is the bus-bandwidth factor: 2(p-1)/p for all-reduce, (p-1)/p for reduce-scatter and
// all-gather (nccl-tests doc/PERFORMANCE.md). On top of the bandwidth term the collective pays
// latency: a base cost plus, per ring step, the step latency and the slowest hop's path latency;
// 2(p-1) steps for all-reduce, p-1 for the others. On an ideal ring of link bandwidth B and hop
// latency a this gives 2(p-1)/p * S/B + 2(p-1)*a for all-reduce.
#pragma once

#include <functional>
#include <map>
#include <vector>

#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/collective_op.hpp"
#include "topology/topology.hpp"

namespace fleetsim {

// Bytes each rank sends per byte of S (the nccl-tests bus-bandwidth factor).
double ring_traffic_factor(CollectiveOp op, int ranks);
// Sequential steps of the ring algorithm.
int ring_steps(CollectiveOp op, int ranks);

struct CollectiveLatency {
  SimTime base{};      // once per collective
  SimTime per_step{};  // per ring step, on top of the hop's path latency
};

class Collectives {
 public:
  Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
              CollectiveLatency latency, int channels);

  // Runs a ring collective over `ring` (GPU vertices in ring order, >= 1 of them) with message
  // size `size_bytes` (nccl-tests S); `done` runs when the last rank has finished.
  void run_ring(CollectiveOp op, const std::vector<VertexId>& ring, double size_bytes,
                std::function<void()> done);

 private:
  struct RingPaths {
    std::vector<LinkUse> links;  // all hops' links, duplicates merged into weights
    SimTime slowest_hop_latency{};
  };
  const RingPaths& ring_paths(const std::vector<VertexId>& ring);

  Engine* engine_;
  FlowNetwork* network_;
  const Topology* topology_;
  CollectiveLatency latency_;
  int channels_;
  std::map<std::vector<VertexId>, RingPaths> ring_cache_;
};

}  // namespace fleetsim
