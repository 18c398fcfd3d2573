#include <catch2/catch.hpp>

#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;

namespace {

// p GPUs on a physical ring: GPU i <-> GPU i+1, each direction B bytes/s with latency alpha.
Topology ideal_ring(int p, double bytes_per_s, SimTime alpha) {
  Topology topo;
  for (int i = 0; i < p; ++i)
    topo.add_vertex(VertexKind::gpu, "gpu" + std::to_string(i), 0);
  for (int i = 0; i < p; ++i) {
    topo.add_duplex_link(i, (i + 1) % p, LinkKind::nvlink, bytes_per_s, alpha);
  }
  return topo;
}

std::vector<double> line_rates(const Topology& topo) {
  std::vector<double> rates;
  for (LinkId l = 0; l < topo.link_count(); ++l)
    rates.push_back(topo.link(l).bytes_per_s);
  return rates;
}

double collective_seconds(CollectiveOp op, int p, double size, double bytes_per_s, SimTime alpha,
                          int channels) {
  const Topology topo = ideal_ring(p, bytes_per_s, alpha);
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{}, channels);
  SimTime done_at{};
  collectives.run_ring(op, topo.gpus(), size, [&] { done_at = engine.now(); });
  engine.run();
  return done_at.seconds();
}

}  // namespace

TEST_CASE("ring all-reduce on an ideal ring: 2(p-1)/p * S/B + 2(p-1) * alpha") {
  // p = 8, S = 1 GB, B = 100 GB/s, alpha = 2 us:
  // 2*7/8 * 1e9/100e9 = 17.5 ms; 2*7 * 2 us = 28 us; total 17.528 ms.
  const double t = collective_seconds(CollectiveOp::all_reduce, 8, 1e9, 100e9, from_us(2), 1);
  CHECK(t == Approx(17.5e-3 + 28e-6).epsilon(1e-6));
}

TEST_CASE("reduce-scatter and all-gather move half the bytes in half the steps") {
  // (p-1)/p * S/B + (p-1) * alpha = 7/8 * 10 ms + 7 * 2 us = 8.764 ms.
  for (const auto op : {CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
    const double t = collective_seconds(op, 8, 1e9, 100e9, from_us(2), 1);
    CHECK(t == Approx(8.75e-3 + 14e-6).epsilon(1e-6));
  }
}

TEST_CASE("channels split the bytes, not the time, on a symmetric ring") {
  const double one = collective_seconds(CollectiveOp::all_reduce, 4, 1e8, 50e9, SimTime{}, 1);
  const double four = collective_seconds(CollectiveOp::all_reduce, 4, 1e8, 50e9, SimTime{}, 4);
  CHECK(four == Approx(one).epsilon(1e-6));
  CHECK(one == Approx(2.0 * 3 / 4 * 1e8 / 50e9).epsilon(1e-6));
}

TEST_CASE("a competing flow on one hop slows the whole ring to that hop's share") {
  // The competitor crosses gpu2->gpu3 for longer than the collective lasts, so the ring channel
  // gets B/2 there and, being one pipelined flow, B/2 everywhere: time doubles.
  const int p = 8;
  const double bandwidth = 100e9, size = 1e9;
  const Topology topo = ideal_ring(p, bandwidth, SimTime{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{}, 1);
  const LinkId hop = topo.route(2, 3).front();
  net.start_flow({{hop, 1.0}}, 100e9, SimTime{}, [] {});
  SimTime done_at{};
  collectives.run_ring(CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  CHECK(done_at.seconds() == Approx(2.0 * (2.0 * 7 / 8 * size / bandwidth)).epsilon(1e-6));
}

TEST_CASE("a one-rank collective is free") {
  CHECK(collective_seconds(CollectiveOp::all_reduce, 1, 1e9, 1e9, from_us(5), 1) == 0.0);
}

TEST_CASE("on an NVSwitch node every GPU port carries the bus bytes") {
  // 8 GPUs on one crossbar: a ring all-reduce sends 2(p-1)/p * S through each GPU's uplink,
  // the nccl-tests bus-bandwidth definition, so busbw = link rate.
  NodeSpec node;
  node.name = "test";
  node.gpus = 8;
  node.nvlink_bytes_per_s = 450e9;
  node.pcie_switches = 4;
  node.pcie_bytes_per_s = 64e9;
  node.host_bytes_per_s = 64e9;
  node.nics = 0;
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{}, 1);
  const double size = 4e9;
  SimTime done_at{};
  collectives.run_ring(CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  const double busbw = size / done_at.seconds() * 2.0 * 7 / 8;
  CHECK(busbw == Approx(450e9).epsilon(1e-6));
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    if (topo.link(l).kind != LinkKind::nvlink)
      continue;
    CHECK(net.link_bytes()[l] == Approx(2.0 * 7 / 8 * size));
  }
}
