// NCCL's NVLS-tree across NVLink domains: NVLS inside each domain, the heads' double binary
// trees across them (sim/collectives/collectives.cpp, plan_nvls_tree).
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <set>
#include <utility>
#include <vector>

#include "common/topology_fixtures.hpp"
#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;
using fleetsim::test::eight_gpu_node;
using fleetsim::test::line_rates;
using fleetsim::test::nvl72_tray;

namespace {

// An NVLS-tree all-reduce of `size` bytes over every GPU of `topo` alone, without latency: how
// long it took, and what each link carried.
struct Run {
  double seconds = 0;
  std::vector<double> link_bytes;  // indexed by LinkId
};
Run run_nvls_tree(const Topology& topo, double nvls_efficiency, double size) {
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{},
                          GpuLinkModes{.nvls_efficiency = nvls_efficiency, .ring_efficiency = 1.0});
  SimTime done_at{};
  collectives.run_with(CollectiveAlgorithm::nvls_tree, CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  return {done_at.seconds(), net.link_bytes()};
}

double nvls_tree_seconds(const Topology& topo, double nvls_efficiency, double size) {
  return run_nvls_tree(topo, nvls_efficiency, size).seconds;
}

// Each rank's tree degree (parent and children) in each of the two trees.
std::vector<std::vector<int>> degrees(const std::array<std::vector<int>, 2>& trees) {
  std::vector<std::vector<int>> degree;
  for (const std::vector<int>& parents : trees) {
    std::vector<int> d(parents.size(), 0);
    for (std::size_t rank = 0; rank < parents.size(); ++rank) {
      if (parents[rank] < 0) continue;
      ++d[rank];
      ++d[static_cast<std::size_t>(parents[rank])];
    }
    degree.push_back(d);
  }
  return degree;
}

}  // namespace

TEST_CASE("NCCL's double binary tree: the trees trees.cc draws, and no rank inside both") {
  // src/graph/trees.cc draws, for 14 ranks, the first tree 0 - 8, 8 - {4, 12}, 4 - {2, 6},
  // 12 - {10, 13}, 2 - {1, 3}, 6 - {5, 7}, 10 - {9, 11}, and its mirror (rank r as 13 - r);
  // for 13 ranks the second tree is the first shifted by one rank (root 1, 1 - 9, 9 - {5, 0}).
  const auto fourteen = double_binary_tree(14);
  CHECK(fourteen[0] == std::vector<int>{-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8, 12});
  for (int rank = 0; rank < 14; ++rank) {
    const int mirrored = fourteen[0][13 - rank];
    CHECK(fourteen[1][rank] == (mirrored < 0 ? -1 : 13 - mirrored));
  }
  const auto thirteen = double_binary_tree(13);
  CHECK(thirteen[0] == std::vector<int>{-1, 2, 4, 2, 8, 6, 4, 6, 0, 10, 12, 10, 8});
  CHECK(thirteen[1] == std::vector<int>{9, -1, 3, 5, 3, 9, 7, 5, 7, 1, 11, 0, 11});
  for (int n = 1; n <= 64; ++n) {
    INFO(n << " ranks");
    const auto trees = double_binary_tree(n);
    for (const std::vector<int>& parents : trees) {
      // One root, and every rank reaches it in fewer than n steps up: a tree.
      CHECK(std::count(parents.begin(), parents.end(), -1) == 1);
      for (int rank = 0; rank < n; ++rank) {
        int at = rank;
        for (int step = 0; step < n && at >= 0; ++step) at = parents[static_cast<std::size_t>(at)];
        CHECK(at == -1);
      }
    }
    // A rank inside one tree (degree 2 or 3) is a leaf of the other, so its two trees' edges
    // number at most 4 (from four ranks on exactly 4 somewhere): what a head's NIC carries.
    const auto degree = degrees(trees);
    int most = 0;
    for (int rank = 0; rank < n; ++rank) {
      const auto r = static_cast<std::size_t>(rank);
      CHECK((degree[0][r] <= 1 || degree[1][r] <= 1));
      most = std::max(most, degree[0][r] + degree[1][r]);
    }
    CHECK(most == (n == 1 ? 0 : n == 2 ? 2 : n == 3 ? 3 : 4));
  }
}

TEST_CASE("NVLS-tree: NVLS inside each node, the heads' trees across, whichever is slower paces") {
  // 2 nodes x 8 GPUs, 450 GB/s ports, NVLS efficiency 0.533 (ring efficiency 1 here).
  //   Inside a node the switch's reduction paces NVLS at a bus bandwidth of 2 x 0.533 x 450 =
  //   480 GB/s: t = 2 x 7/8 x S / 480 GB/s = S / 274.3 GB/s (the ports would allow S / 400).
  //   Across: 8 heads (a NIC each), head h's shard S/8 half on each tree, the one edge between
  //   the two nodes carrying S/16 each way per tree: S/8 through each NIC each way.
  // With 50 GB/s NICs the nodes pace it (S/8 / 50 = S / 400 is faster): busbw = 2 x 15/16 x
  // 274.3 = 514.3 GB/s, beyond any ring (NIC-bound at 8 x 50 = 400). With 10 GB/s NICs the
  // heads pace it: S/8 / 10 = S / 80, busbw = 1.875 x 80 = 150 GB/s.
  for (const double nic : {50e9, 10e9}) {
    NodeSpec node = eight_gpu_node();
    node.nvls = true;
    node.nic_bytes_per_s = nic;
    const Topology topo = build_cluster(node, 2, FabricSpec{});
    const double size = 16e9;
    const double busbw = 2.0 * 15 / 16 * size / nvls_tree_seconds(topo, 480.0 / 900, size);
    const double expected = nic > 40e9 ? 1.875 * 480e9 / 2 * 8 / 7 : 1.875 * 80e9;
    INFO("NIC " << nic / 1e9 << " GB/s");
    CHECK(busbw == Approx(expected).epsilon(1e-6));
  }
}

TEST_CASE("NVLS-tree across d domains: a head's NIC carries S/H, 1.5 S/H, then 2 S/H each way") {
  // 8-GPU nodes, 8 heads, 10 GB/s NICs: the heads' NICs pace it. NCCL's double binary tree
  // gives a node 1 edge in each tree with 2 nodes (S/H each way: 2 trees x S/(2H)), 2 + 1 with
  // 3, and from 4 on 3 + 1 somewhere (inside one tree, a leaf of the other): t = f S / (8 x 10
  // GB/s), f = 1, 1.5, 2. A ring per rail would give 2(d-1)/d (1.5 on 4, 1.9 on 20).
  NodeSpec node = eight_gpu_node();
  node.nvls = true;
  node.nic_bytes_per_s = 10e9;
  const double size = 8e9;
  for (const auto& [domains, f] : {std::pair{2, 1.0}, {3, 1.5}, {4, 2.0}, {5, 2.0}, {20, 2.0}}) {
    INFO(domains << " domains");
    const Topology topo = build_cluster(node, domains, FabricSpec{});
    CHECK(nvls_tree_seconds(topo, 0.6, size) == Approx(f * size / 8 / 10e9).epsilon(1e-6));
  }
}

TEST_CASE("NVLS-tree heads: one a NIC, at most 32 of a domain (NCCL_MAX_NVLS_ARITY)") {
  // Two NVL72-like domains (18 trays of 4 GPUs, a NIC a GPU): 32 heads, not 72, each with S/32
  // through its NIC each way: with 1 GB/s NICs t = S / 32 GB/s (all 72 would give S / 72).
  NodeSpec tray = nvl72_tray();
  tray.nvls = true;
  tray.nic_bytes_per_s = 1e9;
  const double size = 4e9;
  const Topology racks = build_cluster(tray, 36, FabricSpec{});
  CHECK(nvls_tree_seconds(racks, 0.6, size) == Approx(size / 32e9).epsilon(1e-6));
  // Two 8-GPU nodes with 4 NICs (a GPU pair shares one): 4 heads, S/4 through each NIC, and
  // out of each head's own PCIe link; the other GPU of a pair sends nothing across (were every
  // GPU a head, each would send S/8 over its link, the NICs carrying the same S/4).
  NodeSpec shared = eight_gpu_node();
  shared.nvls = true;
  shared.nics = 4;
  shared.nic_bytes_per_s = 10e9;
  const Topology pairs = build_cluster(shared, 2, FabricSpec{});
  const Run run = run_nvls_tree(pairs, 0.6, size);
  CHECK(run.seconds == Approx(size / 4 / 10e9).epsilon(1e-6));
  std::set<VertexId> nics;
  for (int i = 0; i < 8; ++i) {
    const VertexId gpu = *pairs.gpu_at(0, i);
    const VertexId nic = *pairs.nic_of_gpu(gpu);
    std::vector<LinkId> route;
    pairs.append_route(gpu, nic, route);
    const bool head = nics.insert(nic).second;  // the first GPU of each NIC
    INFO("GPU " << i);
    CHECK(run.link_bytes.at(route.front()) == Approx(head ? size / 4 : 0).margin(1));
  }
}
