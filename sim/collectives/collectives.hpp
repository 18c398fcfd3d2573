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
// Latency and protocols follow the collective library's tuning model (CollectiveCosts): a base
// cost, then each sequential step's latency by the link class it crosses (NVLink, PCIe,
// network): 2(p-1) steps for a ring all-reduce, of which 2(domains - 1) cross the network; p-1
// for reduce-scatter and all-gather; 2((p/domains - 1) + floor(log2 domains)) for a tree. A
// protocol (LL, LL128, Simple) divides the bandwidth by its efficiency and brings its own
// latencies. On an ideal ring of link bandwidth B with Simple at step latency a and no base,
// all-reduce takes 2(p-1)/p * S/B + 2(p-1)*a. At thousands of ranks the ring's latency
// dominates; the tuner then switches to the tree, as NCCL's does, where the library's tree
// limits for the GPUs are known (NCCL's; not RCCL's).
#pragma once

#include <array>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "calibration/collective_costs.hpp"
#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/collective_op.hpp"
#include "topology/topology.hpp"

namespace fleetsim {

// Sequential steps of the ring algorithm for all-reduce, reduce-scatter and all-gather.
int ring_steps(CollectiveOp op, int ranks);

// NCCL's double binary tree over n ranks (src/graph/trees.cc, ncclGetDtree): each rank's parent
// in each of the two trees, -1 at a root. The first tree takes a rank's parent from its lowest
// set bit, so odd ranks are leaves; the second mirrors it (n even) or shifts it by one rank (n
// odd), so that a rank inside one tree is a leaf of the other.
std::array<std::vector<int>, 2> double_binary_tree(int n);

// Simple only, with one latency for every step: for tests and hand-made cases.
struct CollectiveLatency {
  SimTime base{};      // once per collective
  SimTime per_step{};  // per step, whatever link it crosses
};

enum class CollectiveAlgorithm { ring, tree, nvls, nvls_tree, hierarchical, direct, chain, pairs };
const char* to_string(CollectiveAlgorithm algorithm);

struct CollectiveChoice {
  CollectiveAlgorithm algorithm;
  Protocol protocol;
  bool operator==(const CollectiveChoice&) const = default;
};

// NVLS (NVLink SHARP): the NVSwitch reduces. Each GPU sends its whole buffer up once for the
// switch to reduce (S), fetches and multicasts its reduced shard (S/p each way), and receives
// every reduced shard (S): S (1 + 1/p) each way over its NVLink port, whatever p is, so its bus
// bandwidth is not capped by the ring's. The switch's reduction bounds it too: a bus bandwidth
// of 2 x nvls_efficiency x the port's line rate, whatever p is (GB200 NVL72 measures the same on
// 8 and 72 GPUs), which the GPU profile calibrates separately from the ring's (DESIGN.md, "NVLS
// is its own model").
//
// Point-to-point sends between GPUs of one NVLink or xGMI domain run on fewer channels than the
// library's rings (NCCL's p2p channels per peer) and reach less of the link: they have their own
// efficiency too, where the profile calibrates one.
struct GpuLinkModes {
  double nvls_efficiency = 0;  // NVLS bus bandwidth / (2 x NVLink line rate); 0: not available
  double ring_efficiency = 1;  // the fraction the flow network applies to GPU-to-GPU links
  double p2p_efficiency = 0;   // usable fraction for send/recv between GPUs; 0: the ring's
};

class Collectives {
  struct Plan;

 public:
  Collectives(Engine& engine, FlowNetwork& network, const Topology& topology, CollectiveCosts costs,
              GpuLinkModes gpu_links = {});
  Collectives(Engine& engine, FlowNetwork& network, const Topology& topology,
              CollectiveLatency latency, GpuLinkModes gpu_links = {});
  // Callbacks in flight point back at this object and into its channel cache.
  Collectives(const Collectives&) = delete;
  Collectives& operator=(const Collectives&) = delete;

  // The algorithms that can run `op` over `ranks`: for all-reduce a ring, a tree when the ranks
  // span nodes with as many ranks on each, NVLS when they all hang off one reducing NVSwitch,
  // NVLS-tree when they span several such domains with as many ranks on each (NVLS inside each
  // domain, the heads' double binary trees across them, pipelined); NVLS of either kind on three
  // GPUs a domain or more; hierarchical on the same condition as the tree (a reduce-scatter inside
  // each node, an all-reduce of each shard across the nodes, an all-gather inside each node, one
  // after the other, as frameworks compose it from NCCL calls; NCCL itself has no such algorithm,
  // so the tuner leaves it to be forced); a ring for reduce-scatter and all-gather; direct sends
  // for all-to-all (S / p from each rank to each other; see plan_direct); the ring's channels as
  // pipelined chains from the first rank for broadcast (S / channels each); one flow per rank to
  // its successor for send/recv.
  std::vector<CollectiveAlgorithm> candidates(CollectiveOp op,
                                              const std::vector<VertexId>& ranks) const;
  // The protocols the library runs `algorithm` with (NVLS: Simple only).
  std::vector<Protocol> protocols(CollectiveAlgorithm algorithm) const;
  // The tuner: like NCCL's, it picks algorithm and protocol by predicted time for the size, rank
  // count and topology; the prediction is this simulator's own, each candidate run alone on an
  // idle copy of the network, most promising first, skipping candidates whose lower bound
  // cannot beat the best. Memoised per (op, ranks, size). The tree competes only where the
  // library's per-channel limits for these GPUs are known (see choose()).
  // With `forced`, only the protocol is chosen.
  CollectiveChoice choose(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
                          std::optional<CollectiveAlgorithm> forced = std::nullopt);

  // Runs a collective over `ranks` (distinct GPU vertices in rank order) with message size
  // `size_bytes` (nccl-tests S): with the tuner's choice, with a forced algorithm (as NCCL_ALGO
  // does; the fastest protocol for it), or with both forced (NCCL_ALGO and NCCL_PROTO).
  // ModelError if the choice cannot run this op on these ranks. `done` runs when the last rank
  // has finished.
  void run(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
           std::function<void()> done);
  void run_with(CollectiveAlgorithm algorithm, CollectiveOp op, const std::vector<VertexId>& ranks,
                double size_bytes, std::function<void()> done);
  void run_with(CollectiveChoice choice, CollectiveOp op, const std::vector<VertexId>& ranks,
                double size_bytes, std::function<void()> done);
  // One GPU sends `size_bytes` to another (ncclSend / ncclRecv: a pipeline stage's activations
  // or gradients), costed as one direction of a two-rank send/recv with the tuner's protocol.
  void send(VertexId from, VertexId to, double size_bytes, std::function<void()> done);
  // A collective's or a send's plan, planned once (as run() and send() do) for a caller that
  // starts the same one many times: run(plan, done) skips the lookup of its ranks. Valid while
  // this object lives.
  class CachedPlan {
   public:
    // The algorithm and protocol it runs (for a trace), if planned.
    std::optional<CollectiveChoice> choice() const;

   private:
    friend class Collectives;
    const Plan* plan_ = nullptr;
  };
  CachedPlan plan_collective(CollectiveOp op, const std::vector<VertexId>& ranks,
                             double size_bytes);
  CachedPlan plan_send(VertexId from, VertexId to, double size_bytes);
  void run(const CachedPlan& plan, std::function<void()> done);

  // The first flows of the collectives and sends started between begin_batch() and
  // end_batch() enter the network together at end_batch(), sharing out bandwidth once, as
  // they would one by one at this instant (copies of one collective in many replicas).
  void begin_batch();
  void end_batch();

  // The ring step by step, to check the channel form: in each of the ring's steps every rank
  // sends a chunk of S / p to its successor (one flow per hop and channel), and a channel's next
  // step starts when all its hops have delivered. Slower (p flows per step instead of one per
  // channel), so only for checks on small groups.
  void run_ring_chunked(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes,
                        std::function<void()> done);

  // The ring order of each channel, and the links one hop of a ring crosses. `flow` tells the
  // connections of a collective apart (NCCL's channel: its own queue pair, so its own hash
  // under hash routing).
  std::vector<std::vector<VertexId>> channel_rings(const std::vector<VertexId>& ranks) const;
  void append_hop_links(VertexId from, VertexId to, std::uint64_t flow,
                        std::vector<LinkId>& links) const;

 private:
  // A hop between NVLink domains: the GPU it leaves from (PXN's proxy, or `from` itself) and
  // the NICs at either end; nothing inside one node or domain, or where either GPU has no NIC
  // (the hop then routes as the topology does).
  struct NetworkHop {
    VertexId proxy;
    VertexId out_nic;
    VertexId in_nic;
  };
  std::optional<NetworkHop> network_hop(VertexId from, VertexId to) const;
  struct Channel {
    std::vector<VertexId> order;  // the ring, hop h going from order[h] to order[h + 1]
    std::vector<LinkUse> links;   // all hops' links; the flow network merges repeats into weights
    std::vector<std::vector<LinkUse>> hops;  // each hop's links, in ring order
  };
  struct PlannedFlow {
    std::vector<LinkUse> links;
    double bytes;
    double max_rate = FlowNetwork::kUncapped;  // the channel's own ceiling, bytes/s on the wire
  };
  // A collective as flows that all start at once, and the latency paid after the last byte;
  // then, for a collective of several steps, each later phase in turn, the same way.
  struct Phase {
    std::vector<PlannedFlow> flows;
    SimTime latency{};
  };
  struct Plan {
    std::vector<PlannedFlow> flows;
    SimTime latency{};
    std::vector<Phase> later;
    CollectiveChoice choice{};  // what the cached plans of plan_collective and plan_send run
  };
  // (op, ranks, size, forced algorithm if any).
  using ChoiceKey =
      std::tuple<CollectiveOp, std::vector<VertexId>, double, std::optional<CollectiveAlgorithm>>;

  Plan plan(CollectiveChoice choice, CollectiveOp op, const std::vector<VertexId>& ranks,
            double size_bytes);
  const ProtocolCost& protocol_cost(CollectiveChoice choice) const;
  SimTime latency(CollectiveChoice choice, CollectiveOp op,
                  const std::vector<VertexId>& ranks) const;
  CollectiveChoice fastest(const std::vector<CollectiveAlgorithm>& algorithms, CollectiveOp op,
                           const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_ring(CollectiveOp op, const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_tree(Protocol protocol, const std::vector<VertexId>& ranks, double size_bytes);
  // The tree's bus bandwidth as the library's tuner caps it (its channels times the per-channel
  // limit for the protocol, GPU generation and node count), or nothing if the library has no
  // limits for these GPUs.
  std::optional<double> tree_bus_bandwidth_cap(Protocol protocol,
                                               const std::vector<VertexId>& ranks) const;
  // A time `choice` cannot beat on an idle network: its latency, and for the tree its capped
  // bandwidth. Lets the tuner skip simulating candidates that cannot win.
  SimTime time_lower_bound(CollectiveChoice choice, CollectiveOp op,
                           const std::vector<VertexId>& ranks, double size_bytes) const;
  Plan plan_nvls(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_nvls_tree(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_hierarchical(CollectiveChoice choice, const std::vector<VertexId>& ranks,
                         double size_bytes);
  void start_phases(std::shared_ptr<std::vector<Phase>> phases, std::size_t next,
                    std::function<void()> done);
  bool nvls_tree_possible(const std::vector<VertexId>& ranks) const;
  PlannedFlow nvls_ports(const std::vector<VertexId>& gpus, double size_bytes) const;
  Plan plan_direct(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_broadcast(const std::vector<VertexId>& ranks, double size_bytes);
  Plan plan_pairs(const std::vector<VertexId>& ranks, double size_bytes);
  // One flow of `bytes_each` per (from, to) pair, all in one step.
  Plan plan_transfers(const std::vector<std::pair<VertexId, VertexId>>& pairs,
                      double bytes_each) const;
  void start(const Plan& plan, std::function<void()> done);
  static Plan merged(Plan plan);
  // Flows into the network now, or into the open batch.
  void enter(std::vector<FlowNetwork::FlowRequest> requests);
  SimTime idle_time(const Plan& plan) const;
  void check_ranks(const std::vector<VertexId>& ranks) const;
  bool nvls_possible(const std::vector<VertexId>& ranks) const;
  std::vector<LinkUse> hop_uses(VertexId from, VertexId to, std::uint64_t flow) const;

  const std::vector<Channel>& channels(const std::vector<VertexId>& ranks);
  std::vector<std::vector<VertexId>> group_by_node(const std::vector<VertexId>& ranks) const;
  std::vector<std::vector<VertexId>> node_cycles(const std::vector<VertexId>& gpus) const;

  struct ChunkedChannel;
  void run_chunked_step(const std::shared_ptr<ChunkedChannel>& state);

  Engine* engine_;
  FlowNetwork* network_;
  const Topology* topology_;
  CollectiveCosts costs_;
  GpuLinkModes gpu_links_;
  std::map<std::vector<VertexId>, std::vector<Channel>> channel_cache_;
  std::map<ChoiceKey, CollectiveChoice> choice_cache_;
  // The tuner's plans, as a step runs the same collectives over and over: by run() and send().
  // Looked up through a view of the key, so that a lookup allocates nothing; never iterated.
  struct PlanKeyView {
    CollectiveOp op;
    std::span<const VertexId> ranks;
    double size_bytes;
  };
  struct PlanKey {
    CollectiveOp op;
    std::vector<VertexId> ranks;
    double size_bytes;
    operator PlanKeyView() const { return {op, ranks, size_bytes}; }
  };
  struct PlanKeyHash {
    using is_transparent = void;
    std::size_t operator()(PlanKeyView key) const;
  };
  struct PlanKeyEqual {
    using is_transparent = void;
    bool operator()(PlanKeyView a, PlanKeyView b) const;
  };
  using PlanCache = std::unordered_map<PlanKey, Plan, PlanKeyHash, PlanKeyEqual>;
  PlanCache plan_cache_;
  PlanCache send_plan_cache_;
  std::optional<std::vector<FlowNetwork::FlowRequest>> batch_;  // between begin and end_batch
};

}  // namespace fleetsim
