// Collectives as flows on the topology.
//
// A ring collective over p ranks runs on several channels, as NCCL's does; each channel is ONE
// flow over all the links of all its hops, so it moves at the pace of its slowest hop, as a
// pipelined ring does, and shares links max-min fairly with other traffic. Each channel carries
// factor * S / channels bytes, where S is the nccl-tests message size and factor the
// bus-bandwidth factor: 2(p-1)/p for all-reduce, (p-1)/p for reduce-scatter and all-gather
// (nccl-tests doc/PERFORMANCE.md).
//
// Channels and NICs. Within one node a single ring order suffices on an NVSwitch crossbar, where
// every order loads each GPU port alike; on a full mesh (xGMI) the channels follow edge-disjoint
// Hamiltonian cycles, so that together they use every GPU-to-GPU link. Across nodes there is one
// channel per GPU of a node, and channel c rotates each node's order to start at its c-th GPU, so
// its inter-node hop enters through that GPU's NIC: every rail carries 1/channels of the traffic.
// The hop from node n to node n+1 is rail-matched the way NCCL's PXN does it: over NVLink to the
// GPU of node n that has the destination's local index, out through its NIC, across that rail's
// leaf switch, and in through the destination's NIC.
//
// Latency. Each collective pays a base cost and, for each of its sequential steps, the larger of
// the calibrated per-step latency and the slowest hop's path latency: 2(p-1) steps for a ring
// all-reduce, p-1 for reduce-scatter and all-gather, 2((p/nodes - 1) + floor(log2 nodes)) for a
// tree. On an ideal ring of link bandwidth B and hop latency a, with no base and a per-step
// latency below a, all-reduce takes 2(p-1)/p * S/B + 2(p-1)*a. At thousands of ranks the ring's
// latency dominates; NCCL's tuner then switches to its tree, which this one does not do yet.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/collective_op.hpp"
#include "topology/topology.hpp"

namespace fleetsim {

// Sequential steps of the ring algorithm for all-reduce, reduce-scatter and all-gather.
int ring_steps(CollectiveOp op, int ranks);

struct CollectiveLatency {
  SimTime base{};      // once per collective
  SimTime per_step{};  // per ring step, at least (a slower hop's path latency takes over)
};

enum class CollectiveAlgorithm { ring, tree, nvls, direct, chain, pairs };
const char* to_string(CollectiveAlgorithm algorithm);

// NVLS (NVLink SHARP): the NVSwitch reduces. Each GPU sends its whole buffer up once for the
// switch to reduce (S), fetches and multicasts its reduced shard (S/p each way), and receives
// every reduced shard (S): S (1 + 1/p) each way over its NVLink port, whatever p is, so its bus
// bandwidth is not capped by the ring's. It moves data at its own protocol efficiency, which the
// GPU profile calibrates separately from the ring's (DESIGN.md, "NVLS is its own model").
struct NvlsSupport {
  double efficiency = 0;       // usable fraction of NVLink line rate under NVLS; 0: not available
  double ring_efficiency = 1;  // the fraction the flow network already applies to NVLink links
};

// NCCL's tuning model rates its tree at 0.9 of the bus bandwidth its ring would reach
// (NVIDIA/nccl src/graph/tuning.cc: "busBw * .9" for the tree algorithm).
inline constexpr double kTreeEfficiency = 0.9;

class Collectives {
 public:
  Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
              CollectiveLatency latency, NvlsSupport nvls = {});
  // Callbacks in flight point back at this object and into its channel cache.
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  // The algorithms that can run `op` over `ranks`: for all-reduce a ring, a tree when the ranks
  // span nodes with as many ranks on each, NVLS when they all hang off one reducing NVSwitch; a
  // ring for reduce-scatter and all-gather; direct sends for all-to-all (one flow per pair of
  // ranks, S / p each); the ring's channels as pipelined chains from the first rank for broadcast
  // (S / channels each); one flow per rank to its successor for send/recv.
  std::vector<CollectiveAlgorithm> candidates(CollectiveOp op,
                                              const std::vector<VertexId>& ranks) const;
  // The tuner: like NCCL's, it picks by predicted time for the size, rank count and topology;
  // the prediction is this simulator's own, each candidate run alone on an idle copy of the
  // network. Memoised per (op, ranks, size). It does not pick the tree yet (see choose()).
  CollectiveAlgorithm choose(CollectiveOp op, const std::vector<VertexId>& ranks,
                             double size_bytes);

  // Runs a collective over `ranks` (distinct GPU vertices in rank order) with message size
  // `size_bytes` (nccl-tests S), with the tuner's algorithm or a forced one (as NCCL_ALGO does;
  // ModelError if it cannot run this op on these ranks). `done` runs when the last rank has
  // finished.
  void run(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
           std::function<void()> done);
  void run_with(CollectiveAlgorithm algorithm, CollectiveOp op, const std::vector<VertexId>& ranks,
                double size_bytes, std::function<void()> done);

  // The ring step by step, to check the channel form: in each of the ring's steps every rank
  // sends a chunk of S / p to its successor (one flow per hop and channel), and a channel's next
  // step starts when all its hops have delivered. Slower (p flows per step instead of one per
  // channel), so only for checks on small groups.
  void run_ring_chunked(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
                        std::function<void()> done);

  // The ring order of each channel, and the links one hop of a ring crosses.
  std::vector<std::vector<VertexId>> channel_rings(const std::vector<VertexId>& ranks) const;
  std::vector<LinkId> hop_links(VertexId from, VertexId to) const;

 private:
  struct Channel {
    std::vector<VertexId> order;  // the ring, hop h going from order[h] to order[h + 1]
    std::vector<LinkUse> links;   // all hops' links; the flow network merges repeats into weights
    std::vector<std::vector<LinkUse>> hops;  // each hop's links, in ring order
    SimTime slowest_hop_latency{};
  };
  struct PlannedFlow {
    std::vector<LinkUse> links;
    double bytes;
  };
  // A collective as flows that all start at once, and the latency paid after the last byte.
  struct Plan {
    std::vector<PlannedFlow> flows;
    SimTime latency{};
  };
  using ChoiceKey = std::tuple<CollectiveOp, std::vector<VertexId>, double>;

  Plan plan(CollectiveAlgorithm algorithm, CollectiveOp op, const std::vector<VertexId>& ranks,
            double size_bytes);
  Plan plan_ring(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_tree(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_nvls(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_direct(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_broadcast(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_pairs(const std::vector<VertexId>& ranks, double size_bytes);
  // One flow of `bytes_each` per (from, to) pair, all in one step.
  Plan plan_transfers(const std::vector<std::pair<VertexId, VertexId>>& pairs,
                      double bytes_each) const;
  void start(Plan plan, std::function<void()> done);
  SimTime idle_time(const Plan& plan) const;
  void check_ranks(const std::vector<VertexId>& ranks) const;
  bool nvls_possible(const std::vector<VertexId>& ranks) const;
  struct HopPath {
    std::vector<LinkUse> links;
    SimTime latency{};  // the sum of its links' latencies
  };
  HopPath hop_path(VertexId from, VertexId to) const;
  PlannedFlow point_to_point(VertexId from, VertexId to, double bytes, SimTime& slowest_hop) const;

  const std::vector<Channel>& channels(const std::vector<VertexId>& ranks);
  SimTime step_latency(const std::vector<Channel>& ring_channels) const;
  std::vector<std::vector<VertexId>> group_by_node(const std::vector<VertexId>& ranks) const;
  std::vector<std::vector<VertexId>> node_cycles(const std::vector<VertexId>& gpus) const;

  struct ChunkedChannel;
  void run_chunked_step(const std::shared_ptr<ChunkedChannel>& state);

  Engine* engine_;
  FlowNetwork* network_;
  const Topology* topology_;
  CollectiveLatency latency_;
  NvlsSupport nvls_;
  std::map<std::vector<VertexId>, std::vector<Channel>> channel_cache_;
  std::map<ChoiceKey, CollectiveAlgorithm> choice_cache_;
};

}  // namespace fleetsim
