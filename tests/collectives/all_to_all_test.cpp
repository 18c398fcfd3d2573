// The all-to-all's sends across nodes as one flow per (source node, target GPU)
// (sim/collectives/collectives.cpp, plan_direct): the same times and shares as a flow a send.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "common/topology_fixtures.hpp"
#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;
using fleetsim::test::eight_gpu_node;
using fleetsim::test::line_rates;

namespace {

struct Finish {
  double all_to_all = 0;  // seconds until the last of its bytes arrived
  double beside = 0;      // seconds until the send beside it finished
};

// An all-to-all of `size` over every GPU of `topo`, with a send of `beside_bytes` from GPU 0 of
// node 0 to GPU 0 of node 1 starting with it (sharing GPU 0's NIC); the all-to-all either as
// the collective or as the n(n - 1) sends of S/n it stands for, one flow each.
Finish run(const Topology& topo, double size, double beside_bytes, bool as_sends) {
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  Finish finish;
  const std::vector<VertexId>& gpus = topo.gpus();
  const double each = size / static_cast<double>(gpus.size());
  collectives.begin_batch();
  if (as_sends) {
    for (const VertexId from : gpus) {
      for (const VertexId to : gpus) {
        if (from == to) continue;
        collectives.send(from, to, each, [&] {
          finish.all_to_all = std::max(finish.all_to_all, engine.now().seconds());
        });
      }
    }
  } else {
    collectives.run(CollectiveOp::all_to_all, gpus, size,
                    [&] { finish.all_to_all = engine.now().seconds(); });
  }
  collectives.send(*topo.gpu_at(0, 0), *topo.gpu_at(1, 0), beside_bytes,
                   [&] { finish.beside = engine.now().seconds(); });
  collectives.end_batch();
  engine.run();
  return finish;
}

}  // namespace

TEST_CASE("all-to-all across nodes: a flow per source node and target runs as its sends do") {
  // 4 nodes x 8 GPUs, 50 GB/s NICs: alone, GPU j's NIC carries the 8 sends of node a's GPUs to
  // GPU j of each of the 3 other nodes, 8 x 3 x S/32 = 3/4 S each way: t = 3/4 S / 50 GB/s.
  const Topology topo = build_cluster(eight_gpu_node(), 4, FabricSpec{});
  const double size = 3.2e9;
  const Finish alone = run(topo, size, 1, false);
  CHECK(alone.all_to_all == Approx(0.75 * size / 50e9).epsilon(1e-6));
  // Beside a send through GPU 0's NIC, each of the 24 sends it carries for the all-to-all
  // counts as a flow in the sharing, as when each is its own flow: the same finishing times.
  for (const double beside : {1e8, 1e9, 4e9}) {
    INFO("beside " << beside << " B");
    const Finish together = run(topo, size, beside, false);
    const Finish one_by_one = run(topo, size, beside, true);
    CHECK(together.all_to_all == Approx(one_by_one.all_to_all).epsilon(1e-9));
    CHECK(together.beside == Approx(one_by_one.beside).epsilon(1e-9));
    CHECK(together.all_to_all > alone.all_to_all);
  }
}
