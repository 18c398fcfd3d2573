#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/topology_fixtures.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;
using fleetsim::test::line_rates;

namespace {

// One GPU and one 50 GB/s NIC per node: every node is one port of rail 0.
NodeSpec one_nic_node() {
  NodeSpec node;
  node.name = "one-nic";
  node.gpus = 1;
  node.gpu_fabric = GpuFabric::pcie_only;
  node.pcie_switches = 1;
  node.pcie_bytes_per_s = 64e9;
  node.host_bytes_per_s = 64e9;
  node.nics = 1;
  node.nic_bytes_per_s = 50e9;
  return node;
}

VertexId nic_of_node(const Topology& topo, int node) {
  return *topo.nic_of_gpu(*topo.gpu_at(node, 0));
}

// Rate of each of `pairs` concurrent NIC-to-NIC flows from node i to node first_target + i.
double concurrent_flow_rate(const Topology& topo, int pairs, int first_target) {
  Engine engine;
  FlowNetwork network(engine, line_rates(topo));
  std::vector<FlowNetwork::FlowId> flows;
  for (int i = 0; i < pairs; ++i) {
    std::vector<LinkUse> links;
    for (const LinkId l : topo.route(nic_of_node(topo, i), nic_of_node(topo, first_target + i))) {
      links.push_back({l, 1.0});
    }
    flows.push_back(network.start_flow(links, 1e12, SimTime{}, [] {}));
  }
  const double rate = network.rate(flows.front());
  for (const auto flow : flows) CHECK(network.rate(flow) == Approx(rate));
  return rate;
}

}  // namespace

TEST_CASE("a 2:1 oversubscribed leaf halves the bandwidth that crosses the spine") {
  // 6-port leaves. Non-blocking (1:1): 3 ports down, 3 up; every node of leaf 0 sends to a node
  // of leaf 1: 3 flows share 3 x 50 GB/s of uplink, 50 GB/s each (the NIC rate). At 2:1: 4 ports
  // down, 2 up; 4 flows share 2 x 50 GB/s: 25 GB/s each, half.
  FabricSpec fabric;
  fabric.leaf_ports = 6;
  fabric.oversubscription = 1;
  const Topology full = build_cluster(one_nic_node(), 6, fabric);
  CHECK(concurrent_flow_rate(full, 3, 3) == Approx(50e9));
  fabric.oversubscription = 2;
  const Topology halved = build_cluster(one_nic_node(), 8, fabric);
  CHECK(concurrent_flow_rate(halved, 4, 4) == Approx(25e9));
}

TEST_CASE("traffic that stays under one leaf is not affected by oversubscription") {
  // 2:1, 6-port leaves: nodes 0-3 share leaf 0. Nodes 0, 1 send to nodes 2, 3: NIC-bound.
  FabricSpec fabric;
  fabric.leaf_ports = 6;
  fabric.oversubscription = 2;
  const Topology topo = build_cluster(one_nic_node(), 8, fabric);
  CHECK(concurrent_flow_rate(topo, 2, 2) == Approx(50e9));
}

TEST_CASE("three tiers: pods of leaf_ports / 2 leaves meet at the core") {
  // 4-port leaves, 1:1: 2 nodes per leaf, pods of 2 leaves = 4 nodes. Node 0 to node 1 stays on
  // its leaf (NIC, leaf, NIC: 2 links); to node 2 it crosses the pod spine (4 links); to node 4
  // the core (6 links).
  FabricSpec fabric;
  fabric.leaf_ports = 4;
  fabric.tiers = 3;
  const Topology topo = build_cluster(one_nic_node(), 8, fabric);
  CHECK(topo.route(nic_of_node(topo, 0), nic_of_node(topo, 1)).size() == 2);
  CHECK(topo.route(nic_of_node(topo, 0), nic_of_node(topo, 2)).size() == 4);
  const auto across_pods = topo.route(nic_of_node(topo, 0), nic_of_node(topo, 4));
  CHECK(across_pods.size() == 6);
  bool via_core = false;
  for (const LinkId l : across_pods) via_core |= topo.vertex(topo.link(l).to).name == "core";
  CHECK(via_core);
}

namespace {

NodeSpec eight_rail_node() {
  NodeSpec node = one_nic_node();
  node.gpus = 8;
  node.nics = 8;
  node.pcie_switches = 4;
  return node;
}

// 4-GPU trays of one NVLink domain `trays` trays wide, one NIC a GPU (as a GB200 NVL72's).
NodeSpec nvlink_tray(int trays) {
  NodeSpec tray = eight_rail_node();
  tray.gpus = 4;
  tray.nics = 4;
  tray.gpu_fabric = GpuFabric::nvswitch;
  tray.nvlink_bytes_per_s = 900e9;
  tray.nvlink_domain_nodes = trays;
  return tray;
}

// Four GPUs joined two by two by NVLink bridges, two PCIe switches, one NIC.
NodeSpec bridged_pairs_node() {
  NodeSpec node = one_nic_node();
  node.gpus = 4;
  node.gpu_fabric = GpuFabric::nvlink_pairs;
  node.nvlink_bytes_per_s = 300e9;
  node.pcie_switches = 2;
  return node;
}

int count_vertices(const Topology& topo, VertexKind kind) {
  int count = 0;
  for (VertexId v = 0; v < topo.vertex_count(); ++v) count += topo.vertex(v).kind == kind;
  return count;
}

}  // namespace

TEST_CASE("hash routing: one spine per uplink port, each flow pinned by a seeded hash") {
  // 8-port leaves at 1:1: 4 nodes down, 4 ports up, so 4 spines, each leaf-spine link a quarter
  // of the 200 GB/s that adaptive routing gives the plane. Node 0 to node 4 crosses the spine
  // tier: a flow's spine is fixed by (seed, flow), the same both times asked; over 4,000 flows
  // each spine takes about a quarter (binomial sigma 27: within 5 sigma).
  FabricSpec fabric;
  fabric.leaf_ports = 8;
  fabric.routing = FabricRouting::hash;
  const Topology topo = build_cluster(one_nic_node(), 8, fabric);
  CHECK(count_vertices(topo, VertexKind::spine_switch) == 4);
  const VertexId from = nic_of_node(topo, 0);
  const VertexId to = nic_of_node(topo, 4);
  std::map<std::string, int> flows_by_spine;
  for (std::uint64_t flow = 0; flow < 4000; ++flow) {
    const std::vector<LinkId> path = topo.route(from, to, flow);
    REQUIRE(path.size() == 4);
    CHECK(path == topo.route(from, to, flow));
    const Link& up = topo.link(path[1]);
    CHECK(up.bytes_per_s == Approx(50e9));
    CHECK(topo.link(path[2]).from == up.to);  // down from the same spine
    ++flows_by_spine[topo.vertex(up.to).name];
  }
  REQUIRE(flows_by_spine.size() == 4);
  for (const auto& [spine, flows] : flows_by_spine) {
    INFO(spine);
    CHECK(std::abs(flows - 1000) < 5 * 27);
  }
  // Another seed pins the flows elsewhere.
  fabric.hash_seed = 2;
  const Topology reseeded = build_cluster(one_nic_node(), 8, fabric);
  int moved = 0;
  for (std::uint64_t flow = 0; flow < 100; ++flow) {
    moved += reseeded.route(from, to, flow) != topo.route(from, to, flow);
  }
  CHECK(moved > 50);
}

TEST_CASE("a 512-node rail-optimised cluster needs three tiers of 64-port switches") {
  // 8 rails; 64-port leaves at 1:1 serve 32 nodes each: 512 / 32 = 16 leaves per rail, 128 in
  // all, more than a 64-port spine tier can take: three tiers, pods of 32 leaves = 4 groups of
  // 32 nodes with their 8 rails, so 4 pods, each with a spine plane, plus the core.
  const NodeSpec node = eight_rail_node();
  const Topology topo = build_cluster(node, 512, FabricSpec{});
  CHECK(count_vertices(topo, VertexKind::leaf_switch) == 128);
  CHECK(count_vertices(topo, VertexKind::spine_switch) == 4 + 1);
  CHECK(topo.gpus().size() == 4096);
  FabricSpec two_tiers;
  two_tiers.tiers = 2;
  CHECK_THROWS_AS(build_cluster(node, 512, two_tiers), ModelError);
}

TEST_CASE("three tiers with eight rails: pods hold whole node groups, the core their uplinks") {
  // 8-port leaves at 1:1: 4 nodes per leaf, uplink 4 x 50 GB/s = 200 GB/s. A pod would hold
  // 8 / 2 = 4 leaves, fewer than the 8 rails of one node group; pods never split a group, so
  // each holds one group: nodes 0-3 in pod 0, 4-7 in pod 1. Rail 0 from node 0 to node 4 crosses
  // both pod spines and the core: 6 links. Each pod sends up what its 8 leaves can: 8 x 200 = 1600
  // GB/s.
  FabricSpec fabric;
  fabric.leaf_ports = 8;
  fabric.tiers = 3;
  const Topology topo = build_cluster(eight_rail_node(), 8, fabric);
  const auto nic0 = *topo.nic_of_gpu(*topo.gpu_at(0, 0));
  const auto nic4 = *topo.nic_of_gpu(*topo.gpu_at(4, 0));
  CHECK(topo.route(nic0, nic4).size() == 6);
  int core_links = 0;
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    if (topo.vertex(topo.link(l).to).name != "core") continue;
    ++core_links;
    CHECK(topo.link(l).bytes_per_s == Approx(1600e9));
  }
  CHECK(core_links == 2);
}

TEST_CASE("routes stay out of third nodes, but cross an NVLink domain that spans trays") {
  // The search never enters a node that is neither the source's nor the destination's; an
  // NVSwitch shared by trays stays open (it carries the first tray's node index).
  const Topology topo = build_cluster(nvlink_tray(4), 8, FabricSpec{});
  const auto across_trays = topo.route(*topo.gpu_at(1, 0), *topo.gpu_at(3, 2));
  REQUIRE(across_trays.size() == 2);  // GPU, domain NVSwitch, GPU
  CHECK(topo.vertex(topo.link(across_trays[0]).to).kind == VertexKind::nvswitch);
  const VertexId nic0 = *topo.nic_of_gpu(*topo.gpu_at(0, 0));
  const VertexId nic5 = *topo.nic_of_gpu(*topo.gpu_at(5, 0));
  for (const LinkId l : topo.route(nic0, nic5)) {
    const Vertex& through = topo.vertex(topo.link(l).to);
    CHECK((through.kind == VertexKind::leaf_switch || through.kind == VertexKind::spine_switch ||
           through.kind == VertexKind::nic));
    if (through.kind == VertexKind::nic) CHECK(topo.link(l).to == nic5);
  }
  // A switch as an endpoint: the NIC's own leaf is one hop away.
  const LinkId up = topo.route(nic0, nic5).front();
  CHECK(topo.route(nic0, topo.link(up).to).size() == 1);
}

TEST_CASE("NVLink bridges join GPUs two by two, and other pairs route over PCIe") {
  const Topology topo = build_cluster(bridged_pairs_node(), 1, FabricSpec{});
  const std::vector<VertexId> gpus = topo.gpus();
  REQUIRE(gpus.size() == 4);
  for (const auto& [a, b] : {std::pair{0, 1}, std::pair{2, 3}}) {
    REQUIRE(topo.link_between(gpus[a], gpus[b]));
    CHECK(topo.link(*topo.link_between(gpus[a], gpus[b])).kind == LinkKind::nvlink);
    CHECK(topo.route(gpus[a], gpus[b]).size() == 1);
  }
  CHECK_FALSE(topo.link_between(gpus[1], gpus[2]));
  for (const LinkId l : topo.route(gpus[1], gpus[2])) {
    CHECK(topo.link(l).kind == LinkKind::pcie);
  }
}

TEST_CASE("a failed route leaves the search state clean for the next one") {
  // Two unconnected GPUs, then a route that exists: the second search must be as from scratch.
  Topology topo;
  const VertexId a = topo.add_vertex(VertexKind::gpu, "a", 0, 0);
  const VertexId b = topo.add_vertex(VertexKind::gpu, "b", 0, 1);
  const VertexId c = topo.add_vertex(VertexKind::pcie_switch, "c", 0, 0);
  const VertexId d = topo.add_vertex(VertexKind::gpu, "d", 1, 0);
  topo.add_duplex_link(a, c, LinkKind::pcie, 1e9, SimTime{});
  topo.add_duplex_link(c, b, LinkKind::pcie, 1e9, SimTime{});
  CHECK_THROWS_AS(topo.route(a, d), ModelError);
  for (int i = 0; i < 3; ++i) {
    const auto path = topo.route(a, b);
    REQUIRE(path.size() == 2);
    CHECK(topo.link(path[0]).to == c);
    CHECK(topo.link(path[1]).to == b);
  }
}

// Rates over `topo` with its links that never bind marked, and without: 40 flows between the
// nodes' GPUs started one by one (node i's leaf first, so that uplinks fill), some capped,
// every rate agreeing after every start and finish, and every link's bytes at the end.
void check_marks_change_no_rate(const Topology& topo, int nodes) {
  Engine engine;
  FlowNetwork shared(engine, line_rates(topo));
  FlowNetwork marked(engine, line_rates(topo), links_that_never_bind(topo, line_rates(topo)));
  std::vector<std::pair<FlowNetwork::FlowId, FlowNetwork::FlowId>> flows;
  const auto agree = [&] {
    for (const auto& [a, b] : flows) CHECK(marked.rate(b) == Approx(shared.rate(a)).epsilon(1e-12));
  };
  for (int k = 0; k < 40; ++k) {
    const int from = k < nodes / 2 ? k : (5 * k) % nodes;
    const int to = k < nodes / 2 ? k + nodes / 2 : (3 * k + 1) % nodes;
    if (from == to) continue;
    std::vector<LinkUse> links;
    for (const LinkId l : topo.route(*topo.gpu_at(from, 0), *topo.gpu_at(to, 0))) {
      links.push_back({l, 1.0});
    }
    const double size = 1e9 * (1 + k % 7);
    const double ceiling = k % 3 == 0 ? 20e9 : FlowNetwork::kUncapped;
    engine.schedule_at(SimTime::from_ns(1000 * k), [&, links, size, ceiling] {
      flows.emplace_back(shared.start_flow(links, size, SimTime{}, agree, ceiling),
                         marked.start_flow(
                             links, size, SimTime{}, [] {}, ceiling));
      agree();
    });
  }
  engine.run();
  REQUIRE(flows.size() > 30);
  CHECK(marked.bytes_delivered() == Approx(shared.bytes_delivered()));
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    CHECK(marked.link_bytes()[l] == Approx(shared.link_bytes()[l]).epsilon(1e-12));
  }
}

TEST_CASE(
    "a non-blocking fabric's switch links never bind: left out of the sharing, no rate moves") {
  // 8-port leaves, 8 one-NIC nodes: two leaves. At 1:1 a leaf's uplink carries at most what its
  // 4 ports bring, and the plane's link down to a leaf at most what that leaf's ports take: they
  // never bind. At 3:1 (6 ports down, 2 up) with three leaves the uplinks do, and under hash
  // routing each spine's quarter of an uplink does. With two leaves all that a spine takes in
  // from one leaf goes out to the other: one link of each such pair rests on the other, which
  // stays enforced. In three tiers a pod spine's link up to the core carries at most what its
  // leaves' uplinks bring, themselves bounded by the leaves' ports, and its link down at most
  // what those leaves' downlinks take: a bound may rest on links marked before it, as long as
  // every chain of bounds ends on links that are enforced. Links to and from NICs and GPUs
  // always may bind.
  const auto never_bind = [](const Topology& topo) {
    return links_that_never_bind(topo, line_rates(topo));
  };
  const auto is_fabric = [](const Topology& topo, VertexId v) {
    const VertexKind kind = topo.vertex(v).kind;
    return kind == VertexKind::leaf_switch || kind == VertexKind::spine_switch;
  };
  // How many links are marked, checking that each one joins two fabric switches.
  const auto marked_between_switches = [&](const Topology& topo) {
    const std::vector<bool> never = never_bind(topo);
    int marked = 0;
    for (LinkId l = 0; l < topo.link_count(); ++l) {
      if (!never[l]) continue;
      ++marked;
      CHECK(is_fabric(topo, topo.link(l).from));
      CHECK(is_fabric(topo, topo.link(l).to));
    }
    return marked;
  };
  FabricSpec fabric;
  fabric.leaf_ports = 8;
  const Topology full = build_cluster(one_nic_node(), 8, fabric);
  CHECK(marked_between_switches(full) == 4);  // two leaves, each up and down to the plane
  fabric.oversubscription = 3;
  CHECK(marked_between_switches(build_cluster(one_nic_node(), 18, fabric)) == 0);
  const Topology two_oversubscribed = build_cluster(one_nic_node(), 12, fabric);
  CHECK(marked_between_switches(two_oversubscribed) == 2);  // of the 4
  fabric.oversubscription = 1;
  fabric.routing = FabricRouting::hash;
  CHECK(marked_between_switches(build_cluster(one_nic_node(), 12, fabric)) == 0);
  const Topology two_hashed = build_cluster(one_nic_node(), 8, fabric);
  CHECK(marked_between_switches(two_hashed) == 8);  // of the 16 leaf-spine links
  FabricSpec three_tiers;
  three_tiers.leaf_ports = 4;  // 2 nodes a leaf, 2 leaves a pod: 6 leaves, 3 pods
  three_tiers.tiers = 3;
  const Topology pods = build_cluster(one_nic_node(), 12, three_tiers);
  CHECK(marked_between_switches(pods) == 6 * 2 + 3 * 2);  // every leaf-spine and spine-core link
  check_marks_change_no_rate(full, 8);
  check_marks_change_no_rate(pods, 12);
  check_marks_change_no_rate(two_oversubscribed, 12);
  check_marks_change_no_rate(two_hashed, 8);
}

namespace {

// The route as a breadth-first search from `src` alone finds it, visiting each vertex's links in
// creation order and keeping the first link that reaches a vertex: the definition route() must
// keep, however it searches. The same links are usable: out of the source, or out of a vertex
// that is not a GPU, and never into a third node's NIC, PCIe switch, host or host memory.
std::optional<std::vector<LinkId>> first_found_route(const Topology& topo, VertexId src,
                                                     VertexId dst) {
  std::vector<std::vector<LinkId>> out(topo.vertex_count());
  for (LinkId l = 0; l < topo.link_count(); ++l) out[topo.link(l).from].push_back(l);
  const int src_node = topo.vertex(src).node;
  const int dst_node = topo.vertex(dst).node;
  const auto usable = [&](const Link& link) {
    const Vertex& to = topo.vertex(link.to);
    const bool inside_a_node = to.kind == VertexKind::nic || to.kind == VertexKind::pcie_switch ||
                               to.kind == VertexKind::host || to.kind == VertexKind::host_memory;
    if (inside_a_node && to.node != src_node && to.node != dst_node) return false;
    return link.from == src || topo.vertex(link.from).kind != VertexKind::gpu;
  };
  constexpr LinkId kNone = UINT32_MAX;
  std::vector<LinkId> via(topo.vertex_count(), kNone);
  std::vector<char> seen(topo.vertex_count(), 0);
  std::vector<VertexId> queue{src};
  seen[src] = 1;
  for (std::size_t head = 0; head < queue.size() && !seen[dst]; ++head) {
    for (const LinkId l : out[queue[head]]) {
      const Link& link = topo.link(l);
      if (seen[link.to] || !usable(link)) continue;
      seen[link.to] = 1;
      via[link.to] = l;
      queue.push_back(link.to);
    }
  }
  if (!seen[dst]) return std::nullopt;
  std::vector<LinkId> path;
  for (VertexId at = dst; at != src; at = topo.link(via[at]).from) path.push_back(via[at]);
  std::reverse(path.begin(), path.end());
  return path;
}

void check_routes_are_first_found(const Topology& topo, int stride, int least_compared = 100) {
  int compared = 0;
  for (VertexId src = 0; src < topo.vertex_count(); ++src) {
    for (VertexId dst = src % stride; dst < topo.vertex_count(); dst += stride) {
      if (src == dst) continue;
      const std::optional<std::vector<LinkId>> expected = first_found_route(topo, src, dst);
      if (!expected) {
        CHECK_THROWS_AS(topo.route(src, dst), ModelError);
        continue;
      }
      const std::vector<LinkId> found = topo.route(src, dst);
      if (found != *expected) FAIL_CHECK(topo.vertex(src).name << " -> " << topo.vertex(dst).name);
      ++compared;
    }
  }
  CHECK(compared >= least_compared);
}

}  // namespace

TEST_CASE("a route is the first shortest path a search from its source finds") {
  // Between every kind of vertex (GPUs, NICs, PCIe switches, hosts, leaves, spines, cores), on
  // fabrics whose shortest paths tie many times over: a two-tier and a three-tier fat tree, nodes
  // packed and spread over the leaves, an NVLink domain spanning trays, bridged GPU pairs and
  // GPUs that stage peer traffic through host memory.
  FabricSpec two_tier;
  two_tier.leaf_ports = 8;
  FabricSpec spread = two_tier;
  spread.placement = NodePlacement::spread;
  FabricSpec three_tier = two_tier;
  three_tier.leaf_ports = 4;
  three_tier.tiers = 3;
  SECTION("two tiers, packed") {
    check_routes_are_first_found(build_cluster(eight_rail_node(), 6, two_tier), 7);
  }
  SECTION("two tiers, spread") {
    check_routes_are_first_found(build_cluster(eight_rail_node(), 6, spread), 5);
  }
  SECTION("three tiers") {
    check_routes_are_first_found(build_cluster(one_nic_node(), 12, three_tier), 1);
  }
  SECTION("an NVLink domain over trays") {
    check_routes_are_first_found(build_cluster(nvlink_tray(2), 4, two_tier), 3);
  }
  SECTION("spines under hash routing, and an xGMI mesh") {
    FabricSpec hashed = two_tier;
    hashed.routing = FabricRouting::hash;
    check_routes_are_first_found(build_cluster(eight_rail_node(), 6, hashed), 5);
    NodeSpec mesh = eight_rail_node();
    mesh.gpu_fabric = GpuFabric::xgmi_mesh;
    mesh.xgmi_link_bytes_per_s = 64e9;
    check_routes_are_first_found(build_cluster(mesh, 3, two_tier), 3);
  }
  SECTION("parallel links: the first created is taken") {
    Topology topo;
    const VertexId a = topo.add_vertex(VertexKind::gpu, "a", 0, 0);
    const VertexId s = topo.add_vertex(VertexKind::pcie_switch, "s", 0, 0);
    const VertexId t = topo.add_vertex(VertexKind::pcie_switch, "t", 0, 1);
    const VertexId b = topo.add_vertex(VertexKind::gpu, "b", 0, 1);
    topo.add_duplex_link(a, s, LinkKind::pcie, 1e9, SimTime{});
    topo.add_duplex_link(s, t, LinkKind::pcie, 1e9, SimTime{});
    topo.add_duplex_link(s, t, LinkKind::pcie, 2e9, SimTime{});
    topo.add_duplex_link(t, b, LinkKind::pcie, 1e9, SimTime{});
    check_routes_are_first_found(topo, 1, 12);  // every ordered pair
    CHECK(topo.link(topo.route(a, b)[1]).bytes_per_s == 1e9);
  }
  SECTION("bridged pairs, and peer traffic staged in host memory") {
    check_routes_are_first_found(build_cluster(bridged_pairs_node(), 3, two_tier), 1);
    NodeSpec staged = one_nic_node();
    staged.gpus = 4;
    staged.pcie_switches = 2;
    staged.gpu_p2p = false;
    staged.host_memory_bytes_per_s = 200e9;
    check_routes_are_first_found(build_cluster(staged, 3, two_tier), 1);
  }
}
