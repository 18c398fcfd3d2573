// The hardware graph: GPUs, switches, NICs and hosts as vertices, links as directed edges.
//
// Every physical link is two directed edges, one per direction, each with its own bandwidth, as
// NVLink, PCIe and InfiniBand are full duplex. An NVSwitch domain is one crossbar vertex with one
// aggregate port per GPU (DESIGN.md), not four switch chips. The graph itself (a Boost.Graph
// adjacency_list) stays inside topology.cpp; callers see vertex and link ids, which are dense
// indices in creation order, so everything built on them iterates in a fixed order.
#pragma once

#include <charconv>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "sim/engine/time.hpp"
#include "topology/node_spec.hpp"

namespace fleetsim {

using VertexId = std::uint32_t;
using LinkId = std::uint32_t;

enum class VertexKind {
  gpu,
  nvswitch,
  pcie_switch,
  host,
  host_memory,
  nic,
  leaf_switch,
  spine_switch
};
enum class LinkKind { nvlink, xgmi, pcie, host_memory, infiniband, roce, efa, tcpxo };

const char* to_string(VertexKind kind);
const char* to_string(LinkKind kind);
// The kind of the links a node's NICs drive.
LinkKind fabric_link_kind(NicKind kind);

struct Vertex {
  VertexKind kind;
  std::string name;  // unique, e.g. "n0.gpu3"
  int node = -1;     // -1 for fabric switches
  int index = -1;    // position among the vertices of its kind on its node (GPU 3, NIC 5)
};

struct Link {
  VertexId from;
  VertexId to;
  LinkKind kind;
  double bytes_per_s;  // line rate in this direction
  SimTime latency;
};

class Topology {
 public:
  Topology();
  ~Topology();
  Topology(Topology&&) noexcept;
  Topology& operator=(Topology&&) noexcept;

  VertexId add_vertex(VertexKind kind, std::string name, int node, int index = -1);
  // Adds the one-way link from -> to.
  LinkId add_link(VertexId from, VertexId to, LinkKind kind, double bytes_per_s, SimTime latency);
  // Adds a->b and b->a with the same rate and latency; returns the a->b link (b->a is id + 1).
  LinkId add_duplex_link(VertexId a, VertexId b, LinkKind kind, double bytes_per_s,
                         SimTime latency);

  std::size_t vertex_count() const { return vertices_.size(); }
  std::size_t link_count() const { return links_.size(); }
  const Vertex& vertex(VertexId id) const { return vertices_.at(id); }
  const Link& link(LinkId id) const { return links_.at(id); }
  std::string link_name(LinkId id) const;

  // GPUs in rank order: node-major, then local index.
  const std::vector<VertexId>& gpus() const { return gpus_; }
  // The GPU with local index `index` on `node`, if there is one.
  std::optional<VertexId> gpu_at(int node, int index) const;
  // The NIC a GPU sends through (on its PCIe switch: GPU-NIC affinity), if it has one.
  void set_nic_of_gpu(VertexId gpu, VertexId nic);
  std::optional<VertexId> nic_of_gpu(VertexId gpu) const;

  // The NVSwitch (the NVLink domain) a GPU hangs off, if any. Some NVSwitches reduce in the
  // switch (NVLink SHARP); reducing_switch_of gives a GPU's switch only if it does. A domain's
  // switch carries the node index of the domain's first node.
  std::optional<VertexId> nvswitch_of(VertexId gpu) const;
  void set_in_switch_reduction(VertexId nvswitch);
  std::optional<VertexId> reducing_switch_of(VertexId gpu) const;

  // A node whose preset gives its host memory bandwidth has a host_memory vertex behind its
  // host; `memory_link` is the host -> memory link, whose capacity is the bandwidth that writes
  // and reads share. Offloaded optimizer traffic runs on it, and GPUs without peer-to-peer access
  // exchange data through it (the sender writes, the receiver reads back: a staged transfer uses
  // it twice).
  struct HostMemory {
    VertexId host;
    LinkId memory_link;
    double cpu_cycles_per_s = 0;  // all the host's cores at their base clock; 0: not described
  };
  void set_host_memory(int node, HostMemory memory, bool stages_peer_traffic);
  std::optional<HostMemory> host_memory_of(int node) const;
  // The node's host memory if its GPUs stage peer traffic there.
  std::optional<HostMemory> staging_of(int node) const;

  // The link from a to b, if they are directly connected.
  std::optional<LinkId> link_between(VertexId a, VertexId b) const;

  // Fewest-hop path from src to dst as a list of links; among equal paths the one found first
  // in link creation order, so routes are deterministic. GPUs are endpoints, never transit
  // vertices: forwarding through a peer GPU (NCCL's PXN) is a choice the collective layer makes
  // explicitly. Nor does a route pass through the NICs, PCIe switches or host of a node other
  // than src's and dst's. Throws ModelError if dst is unreachable.
  std::vector<LinkId> route(VertexId src, VertexId dst) const;
  // route(src, dst)'s links appended to `path`, without a vector of their own (for callers
  // that join many routes).
  void append_route(VertexId src, VertexId dst, std::vector<LinkId>& path) const;
  // The route of one flow under hash routing: where the path crosses a group of equal-cost
  // switches, the member is picked by a seeded hash of (flow, src, dst, position), as a switch
  // hashes a packet's flow fields. Without such groups it is route(src, dst).
  std::vector<LinkId> route(VertexId src, VertexId dst, std::uint64_t flow) const;
  // route(src, dst, flow)'s links appended to `path`.
  void append_route(VertexId src, VertexId dst, std::uint64_t flow,
                    std::vector<LinkId>& path) const;
  // Switches that are interchangeable on every path through any of them: each connects to the
  // same vertices below and above. Members are picked in the order given.
  void add_equal_cost_group(std::vector<VertexId> members);
  // Whether some route picks among equal-cost switches by a hash (route(src, dst, flow)).
  bool hashes_routes() const { return !equal_cost_groups_.empty(); }
  // Whether a route through this vertex may take another member of its group instead.
  bool has_equal_cost_peers(VertexId vertex) const {
    return vertex < equal_cost_group_of_.size() && equal_cost_group_of_[vertex] >= 0;
  }
  // The seed of the hash that picks among equal-cost switches (which flows collide).
  void set_hash_seed(std::uint64_t seed) { hash_seed_ = seed; }

 private:
  struct Graph;
  std::unique_ptr<Graph> graph_;
  std::vector<Vertex> vertices_;
  std::vector<Link> links_;
  std::vector<VertexId> gpus_;
  std::vector<std::vector<VertexId>> gpus_by_node_;  // [node][local index], kNoVertex for gaps
  std::vector<VertexId> nic_of_gpu_;                 // indexed by vertex; kNoVertex where none
  std::vector<std::vector<LinkId>> out_links_;       // indexed by vertex, in creation order
  std::vector<std::vector<LinkId>> in_links_;        // indexed by vertex, in creation order
  std::vector<char> reduces_;                        // indexed by vertex: an NVLS-capable NVSwitch
  std::vector<std::optional<HostMemory>> host_memory_;  // indexed by node
  std::vector<char> stages_peer_traffic_;               // indexed by node
  std::vector<std::vector<VertexId>> equal_cost_groups_;
  std::vector<int> equal_cost_group_of_;  // indexed by vertex; -1 where none
  std::uint64_t hash_seed_ = 0;
};

// A fabric's switches out of range: `key` the FabricSpec field, as scenarios name it.
struct FabricProblem {
  std::string key;  // "leaf_ports" or "oversubscription"
  std::string problem;
  std::string hint;
};
// The most ports a switch has: 512, Broadcom Tomahawk 5's 51.2 Tb/s as 512 x 100 Gb/s (its
// product brief, BCM78900). Past this a fabric is refused: hash routing draws each spine.
inline constexpr int kMostLeafPorts = 512;
// leaf_ports from 2 to kMostLeafPorts; an oversubscription from 1 to leaf_ports - 1 (one port
// up at the least: a full leaf's downlinks are at most leaf_ports - 1 times its uplinks).
inline std::optional<FabricProblem> fabric_bounds_problem(const FabricSpec& fabric) {
  const std::string ports = std::to_string(fabric.leaf_ports);
  if (fabric.leaf_ports < 2 || fabric.leaf_ports > kMostLeafPorts) {
    return FabricProblem{"leaf_ports",
                         "expected 2 to " + std::to_string(kMostLeafPorts) + " ports, got " + ports,
                         "a switch's radix: 64 for NDR Quantum-2, 512 at the most (Tomahawk 5)"};
  }
  if (!(fabric.oversubscription >= 1 && fabric.oversubscription <= fabric.leaf_ports - 1)) {
    char given[32] = "?";
    const auto end = std::to_chars(given, given + sizeof given - 1, fabric.oversubscription).ptr;
    *end = '\0';
    return FabricProblem{"oversubscription",
                         "expected a ratio from 1 to " + std::to_string(fabric.leaf_ports - 1) +
                             " (leaf_ports - 1: one port up) with " + ports + "-port leaves, got " +
                             given,
                         "a full leaf's downlink : uplink bandwidth; 1 is non-blocking"};
  }
  return std::nullopt;
}

// Builds `nodes` copies of the node and, when nodes > 1, the fabric that joins their NICs.
Topology build_cluster(const NodeSpec& node, int nodes, const FabricSpec& fabric);

// By link, whether no traffic can load it past `capacity` (by link) before the links it comes
// from or goes to are full: a link out of a fabric switch (leaf or spine) with at least the
// capacity of the switch's other incoming links together, or into one with at least that of its
// other outgoing links. A route is a simple path between endpoints, which a fabric switch never
// is, so every crossing of such a link enters (or leaves) the switch by another link: its load
// stays within theirs, themselves marked before it or enforced (a link another rests on
// unmarked is never marked later, so bounds never lean on each other). A
// non-blocking fat tree's uplinks and spine links never bind; an oversubscribed one's, or a
// hashed spine's share of an uplink, do (with two leaves, one of each pair rests on the other).
std::vector<bool> links_that_never_bind(const Topology& topology,
                                        const std::vector<double>& capacity);

}  // namespace fleetsim
