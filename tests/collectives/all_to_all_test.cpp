// The all-to-all's sends across NVLink domains as one flow per (PXN proxy, target GPU)
// (sim/collectives/collectives.cpp, plan_direct): the same times and shares as a flow a send.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstddef>
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

struct Finish {
  double all_to_all = 0;       // seconds until the last of its bytes arrived
  std::vector<double> beside;  // seconds until each send beside it finished
};

using Send = std::pair<VertexId, VertexId>;

// An all-to-all of `size` over `ranks`, and sends of `beside_bytes` starting with it; the
// all-to-all either as the collective or as the p(p - 1) sends of S/p it stands for, one flow
// each.
Finish run(const Topology& topo, const std::vector<VertexId>& ranks, double size,
           const std::vector<Send>& sends, double beside_bytes, bool as_sends) {
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  Finish finish;
  finish.beside.resize(sends.size());
  const double each = size / static_cast<double>(ranks.size());
  collectives.begin_batch();
  if (as_sends) {
    for (const VertexId a : ranks) {
      for (const VertexId b : ranks) {
        if (a == b) continue;
        collectives.send(a, b, each, [&] {
          finish.all_to_all = std::max(finish.all_to_all, engine.now().seconds());
        });
      }
    }
  } else {
    collectives.run(CollectiveOp::all_to_all, ranks, size,
                    [&] { finish.all_to_all = engine.now().seconds(); });
  }
  for (std::size_t s = 0; s < sends.size(); ++s) {
    collectives.send(sends[s].first, sends[s].second, beside_bytes,
                     [&finish, &engine, s] { finish.beside[s] = engine.now().seconds(); });
  }
  collectives.end_batch();
  engine.run();
  return finish;
}

// The GPUs of nodes [first, last).
std::vector<VertexId> gpus_of(const Topology& topo, int first, int last, int per_node) {
  std::vector<VertexId> gpus;
  for (int node = first; node < last; ++node) {
    for (int i = 0; i < per_node; ++i) gpus.push_back(*topo.gpu_at(node, i));
  }
  return gpus;
}

// The all-to-all against its sends one by one, beside `sends` of each size in turn: when it
// ends and when each of them does.
void check_against_sends(const Topology& topo, const std::vector<VertexId>& ranks, double size,
                         const std::vector<Send>& sends) {
  for (const double beside : {1e8, 1e9, 4e9}) {
    INFO("beside " << beside << " B");
    const Finish together = run(topo, ranks, size, sends, beside, false);
    const Finish one_by_one = run(topo, ranks, size, sends, beside, true);
    CHECK(together.all_to_all == Approx(one_by_one.all_to_all).epsilon(1e-9));
    for (std::size_t s = 0; s < sends.size(); ++s) {
      CHECK(together.beside[s] == Approx(one_by_one.beside[s]).epsilon(1e-9));
    }
  }
}

}  // namespace

TEST_CASE("all-to-all across nodes: a flow per proxy and target runs as its sends do") {
  // 4 nodes x 8 GPUs, 50 GB/s NICs: alone, GPU j's NIC carries the 8 sends of node a's GPUs to
  // GPU j of each of the 3 other nodes, 8 x 3 x S/32 = 3/4 S each way: t = 3/4 S / 50 GB/s.
  const Topology topo = build_cluster(eight_gpu_node(), 5, FabricSpec{});
  const std::vector<VertexId> four = gpus_of(topo, 0, 4, 8);
  const double size = 3.2e9;
  const Finish alone = run(topo, four, size, {}, 0, false);
  CHECK(alone.all_to_all == Approx(0.75 * size / 50e9).epsilon(1e-6));
  SECTION("beside a send out through GPU 0's NIC") {
    // Each of the 24 sends that NIC carries for the all-to-all counts as a flow in the sharing.
    check_against_sends(topo, four, size, {{*topo.gpu_at(0, 0), *topo.gpu_at(1, 0)}});
    CHECK(run(topo, four, size, {{*topo.gpu_at(0, 0), *topo.gpu_at(1, 0)}}, 1e9, false).all_to_all >
          alone.all_to_all);
  }
  SECTION("beside two sends into one target's NIC, and one out of node 0 GPU 0's") {
    // The two sends from the fifth node slow the 24 sends to node 1's GPU 0 to 50/26 GB/s; on
    // node 0 GPU 0's NIC the other 16 and the third send share what those 8 leave, 2.04 GB/s
    // each. Grouped by anything coarser than the target (its index, its node), node 0's sends
    // to GPU 0 of nodes 2 and 3 would slow to 50/26 with them, and the third send get 3.8.
    check_against_sends(topo, four, size,
                        {{*topo.gpu_at(4, 0), *topo.gpu_at(1, 0)},
                         {*topo.gpu_at(4, 1), *topo.gpu_at(1, 0)},
                         {*topo.gpu_at(0, 0), *topo.gpu_at(4, 0)}});
  }
}

TEST_CASE("all-to-all over NVL72-like trays runs as its sends do") {
  // Two domains of 18 four-GPU trays; the all-to-all over trays 0, 1 (domain 0) and 18, 19
  // (domain 1): tray to tray inside a domain over NVLink, a flow a send; across, grouped by
  // the proxy in the sending tray.
  const Topology topo = build_cluster(nvl72_tray(), 36, FabricSpec{});
  std::vector<VertexId> ranks = gpus_of(topo, 0, 2, 4);
  const std::vector<VertexId> far = gpus_of(topo, 18, 20, 4);
  ranks.insert(ranks.end(), far.begin(), far.end());
  check_against_sends(
      topo, ranks, 1.6e9,
      {{*topo.gpu_at(0, 0), *topo.gpu_at(18, 0)}, {*topo.gpu_at(0, 0), *topo.gpu_at(1, 0)}});
}

TEST_CASE("all-to-all between PCIe boxes: a send a flow, each at its own pace") {
  // No NVSwitch: a GPU reaches the proxy of the target's index over its PCIe switch, or over
  // the host's 20 GB/s links from another switch, so the sends through one proxy differ in
  // pace and are not grouped.
  NodeSpec box = eight_gpu_node();
  box.gpu_fabric = GpuFabric::pcie_only;
  box.host_bytes_per_s = 20e9;
  const Topology topo = build_cluster(box, 2, FabricSpec{});
  check_against_sends(topo, topo.gpus(), 1.6e9, {{*topo.gpu_at(0, 0), *topo.gpu_at(1, 0)}});
}
