#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>

#include "common/topology_fixtures.hpp"
#include "sim/collectives/collectives.hpp"
#include "sim/engine/engine.hpp"
#include "sim/engine/errors.hpp"
#include "sim/network/flow_network.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;
using fleetsim::test::eight_gpu_node;
using fleetsim::test::line_rates;
using fleetsim::test::nvl72_tray;

namespace {

// p GPUs on a physical ring: GPU i <-> GPU i+1, each direction B bytes/s with latency alpha.
Topology ideal_ring(int p, double bytes_per_s, SimTime alpha) {
  Topology topo;
  for (int i = 0; i < p; ++i) topo.add_vertex(VertexKind::gpu, "gpu" + std::to_string(i), 0);
  for (int i = 0; i < p; ++i) {
    topo.add_duplex_link(i, (i + 1) % p, LinkKind::nvlink, bytes_per_s, alpha);
  }
  return topo;
}

// One collective alone on `topo`: when it finished, and what each link carried.
struct Run {
  double seconds = 0;
  std::vector<double> link_bytes;  // indexed by LinkId
};

Run run_alone(const Topology& topo, const CollectiveCosts& costs, GpuLinkModes gpu_links,
              CollectiveAlgorithm algorithm, CollectiveOp op, const std::vector<VertexId>& ranks,
              double size) {
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, costs, gpu_links);
  SimTime done_at{};
  collectives.run_with(algorithm, op, ranks, size, [&] { done_at = engine.now(); });
  engine.run();
  return {done_at.seconds(), net.link_bytes()};
}

Run run_alone(const Topology& topo, CollectiveLatency latency, GpuLinkModes gpu_links,
              CollectiveAlgorithm algorithm, CollectiveOp op, const std::vector<VertexId>& ranks,
              double size) {
  return run_alone(topo, CollectiveCosts::simple_only(latency.base, latency.per_step), gpu_links,
                   algorithm, op, ranks, size);
}

// With Simple only: `alpha` per step, `base` once. The links' own latencies play no part: the
// library's per-step latencies already include the wire.
double collective_seconds(CollectiveOp op, int p, double size, double bytes_per_s, SimTime alpha,
                          SimTime base = {}) {
  const Topology topo = ideal_ring(p, bytes_per_s, SimTime{});
  const CollectiveLatency latency{base, alpha};
  const Run run =
      run_alone(topo, latency, GpuLinkModes{}, CollectiveAlgorithm::ring, op, topo.gpus(), size);
  return run.seconds;
}

}  // namespace

TEST_CASE("ring all-reduce on an ideal ring: 2(p-1)/p * S/B + 2(p-1) * alpha") {
  // p = 8, S = 1 GB, B = 100 GB/s, alpha = 2 us:
  // 2*7/8 * 1e9/100e9 = 17.5 ms; 2*7 * 2 us = 28 us; total 17.528 ms.
  const double t = collective_seconds(CollectiveOp::all_reduce, 8, 1e9, 100e9, from_us(2));
  CHECK(t == Approx(17.5e-3 + 28e-6).epsilon(1e-6));
}

TEST_CASE("reduce-scatter and all-gather move half the bytes in half the steps") {
  // (p-1)/p * S/B + (p-1) * alpha = 7/8 * 10 ms + 7 * 2 us = 8.764 ms.
  for (const auto op : {CollectiveOp::reduce_scatter, CollectiveOp::all_gather}) {
    const double t = collective_seconds(op, 8, 1e9, 100e9, from_us(2));
    CHECK(t == Approx(8.75e-3 + 14e-6).epsilon(1e-6));
  }
}

TEST_CASE("latency: a base cost once, then the step latency per step") {
  // Ideal ring, p = 8, S = 1 GB at 100 GB/s (17.5 ms of bandwidth), base 10 us, 5 us per step:
  // 10 us + 14 x 5 us on top.
  const double t =
      collective_seconds(CollectiveOp::all_reduce, 8, 1e9, 100e9, from_us(5), from_us(10));
  CHECK(t == Approx(17.5e-3 + 10e-6 + 14 * 5e-6).epsilon(1e-9));
}

TEST_CASE("a competing flow on one hop slows the whole ring to that hop's share") {
  // The competitor crosses gpu2->gpu3 for longer than the collective lasts, so the ring channel
  // gets B/2 there and, being one pipelined flow, B/2 everywhere: time doubles.
  const int p = 8;
  const double bandwidth = 100e9, size = 1e9;
  const Topology topo = ideal_ring(p, bandwidth, SimTime{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  const LinkId hop = topo.route(2, 3).front();
  net.start_flow({{hop, 1.0}}, 100e9, SimTime{}, [] {});
  SimTime done_at{};
  collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  CHECK(done_at.seconds() == Approx(2.0 * (2.0 * 7 / 8 * size / bandwidth)).epsilon(1e-6));
}

TEST_CASE("a one-rank collective is free") {
  CHECK(collective_seconds(CollectiveOp::all_reduce, 1, 1e9, 1e9, from_us(5)) == 0.0);
}

namespace {

// GPUs without peer-to-peer access, each on its own 64 GB/s root port, staging through host
// memory of `memory_bytes_per_s`.
NodeSpec no_p2p_node(int gpus, double memory_bytes_per_s) {
  NodeSpec node;
  node.name = "no-p2p";
  node.gpus = gpus;
  node.gpu_fabric = GpuFabric::pcie_only;
  node.gpu_p2p = false;
  node.pcie_switches = gpus;
  node.pcie_bytes_per_s = 64e9;
  node.host_bytes_per_s = 64e9;
  node.host_memory_bytes_per_s = memory_bytes_per_s;
  node.nics = 0;
  return node;
}

// eight_gpu_node whose NVSwitch reduces (NVLS), without NICs.
NodeSpec nvls_node() {
  NodeSpec node = eight_gpu_node();
  node.nvls = true;
  node.nics = 0;
  return node;
}

// A ring all-reduce of `size` bytes over every GPU of `topo`, without latency.
Run ring_all_reduce(const Topology& topo, double size) {
  return run_alone(topo, CollectiveLatency{}, GpuLinkModes{}, CollectiveAlgorithm::ring,
                   CollectiveOp::all_reduce, topo.gpus(), size);
}

}  // namespace

TEST_CASE("on an NVSwitch node every GPU port carries the bus bytes") {
  // 8 GPUs on one crossbar: a ring all-reduce sends 2(p-1)/p * S through each GPU's uplink,
  // the nccl-tests bus-bandwidth definition, so busbw = link rate.
  const Topology topo = build_cluster(eight_gpu_node(), 1, FabricSpec{});
  const double size = 4e9;
  const Run run = ring_all_reduce(topo, size);
  const double busbw = size / run.seconds * 2.0 * 7 / 8;
  CHECK(busbw == Approx(450e9).epsilon(1e-6));
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    if (topo.link(l).kind != LinkKind::nvlink) continue;
    CHECK(run.link_bytes[l] == Approx(2.0 * 7 / 8 * size));
  }
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    if (topo.link(l).kind != LinkKind::nvlink) CHECK(run.link_bytes[l] == 0.0);
  }
}

TEST_CASE("across nodes every rail carries an equal share and the NICs set the pace") {
  // 2 nodes x 8 GPUs, 8 NICs of 50 GB/s each on its own rail. 8 channels, each leaving every
  // node through a different NIC: each carries 2(p-1)/p * S / 8 = 1.875 * 16 GB / 8 = 3.75 GB.
  // Each NVLink port is shared by the 8 channels (450 / 8 = 56 GB/s each), each NIC by one
  // (50 GB/s): the NICs bottleneck, 3.75 GB / 50 GB/s = 75 ms, busbw = 8 x 50 = 400 GB/s.
  FabricSpec fabric;
  const Topology topo = build_cluster(eight_gpu_node(), 2, fabric);
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  REQUIRE(collectives.channel_rings(topo.gpus()).size() == 8);
  const double size = 16e9;
  SimTime done_at{};
  collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  CHECK(done_at.seconds() == Approx(0.075).epsilon(1e-6));
  int nic_uplinks = 0;
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    const Link& link = topo.link(l);
    const bool nic_to_leaf = topo.vertex(link.from).kind == VertexKind::nic &&
                             topo.vertex(link.to).kind == VertexKind::leaf_switch;
    if (nic_to_leaf) {
      ++nic_uplinks;
      CHECK(net.link_bytes()[l] == Approx(3.75e9));
    }
    const bool spine = topo.vertex(link.to).kind == VertexKind::spine_switch;
    if (spine) CHECK(net.link_bytes()[l] == 0.0);  // rail-matched: nothing crosses the spine
  }
  CHECK(nic_uplinks == 16);
}

TEST_CASE("spread placement makes every ring hop between nodes cross the oversubscribed spine") {
  // 8 nodes x 8 GPUs, 6-port leaves at 2:1: 4 nodes per leaf, 2 x 50 GB/s up. Packed, nodes
  // 0-3 and 4-7 share a leaf: each rail's ring leaves a leaf once (3 -> 4, 7 -> 0), one flow
  // on 100 GB/s of uplink, so the NICs set the pace as without oversubscription. Spread, nodes
  // 0, 2, 4, 6 share a leaf: all 8 hops cross, 4 flows share each leaf's 100 GB/s, 25 GB/s
  // each: the all-reduce takes twice as long. Non-blocking, placement does not matter.
  const auto all_reduce_seconds = [](double oversubscription, NodePlacement placement) {
    FabricSpec fabric;
    fabric.leaf_ports = 6;
    fabric.oversubscription = oversubscription;
    fabric.placement = placement;
    return ring_all_reduce(build_cluster(eight_gpu_node(), 8, fabric), 16e9).seconds;
  };
  // 2(p-1)/p * S over 8 channels of 50 GB/s, p = 64.
  const double nic_bound = 2.0 * 63 / 64 * 16e9 / 8 / 50e9;
  CHECK(all_reduce_seconds(2, NodePlacement::packed) == Approx(nic_bound).epsilon(1e-6));
  CHECK(all_reduce_seconds(2, NodePlacement::spread) == Approx(2 * nic_bound).epsilon(1e-6));
  CHECK(all_reduce_seconds(1, NodePlacement::spread) == Approx(nic_bound).epsilon(1e-6));
}

TEST_CASE("hash routing: collisions never speed a ring up, and packed rings have none") {
  // 8 nodes x 8 GPUs, 6-port leaves at 1:1: 3 nodes and 3 spines per leaf, each leaf-spine
  // link at the NIC rate. Packed, each rail's ring leaves a leaf once: one flow per uplink
  // whatever the hash, as fast as adaptive routing. Spread, 3 flows leave each leaf over 3
  // spines: where two pick the same spine they share it, so no seed beats adaptive routing and
  // some lose.
  const auto seconds = [](FabricRouting routing, NodePlacement placement, std::uint64_t seed) {
    FabricSpec fabric;
    fabric.leaf_ports = 6;
    fabric.routing = routing;
    fabric.placement = placement;
    fabric.hash_seed = seed;
    return ring_all_reduce(build_cluster(eight_gpu_node(), 8, fabric), 16e9).seconds;
  };
  const double adaptive = seconds(FabricRouting::adaptive, NodePlacement::spread, 1);
  CHECK(seconds(FabricRouting::adaptive, NodePlacement::packed, 1) == Approx(adaptive));
  int slower = 0;
  for (std::uint64_t seed = 1; seed <= 5; ++seed) {
    INFO("seed " << seed);
    CHECK(seconds(FabricRouting::hash, NodePlacement::packed, seed) == Approx(adaptive));
    const double spread = seconds(FabricRouting::hash, NodePlacement::spread, seed);
    CHECK(spread >= adaptive * (1 - 1e-9));
    slower += spread > adaptive * 1.01;
  }
  CHECK(slower > 0);
}

TEST_CASE("without peer-to-peer, GPUs stage through host memory: PCIe or memory bounds") {
  // p GPUs, each on its own root port of B_pcie per direction, no P2P. Every ring hop goes up
  // one GPU's link, into host memory and out again (two uses of the memory bandwidth B_mem),
  // and down the next GPU's link. Each GPU sends at the bus rate, so the ring's busbw is
  // min(B_pcie, B_mem / (2 p)). Written and read bytes balance: memory carries twice what the
  // GPU links carry up.
  const auto run = [](int gpus, double memory_bytes_per_s) {
    const Topology topo = build_cluster(no_p2p_node(gpus, memory_bytes_per_s), 1, FabricSpec{});
    const double size = 1e9;
    const Run run = ring_all_reduce(topo, size);
    double up = 0, memory = 0;
    for (LinkId l = 0; l < topo.link_count(); ++l) {
      const Link& link = topo.link(l);
      if (link.kind == LinkKind::host_memory) memory += run.link_bytes[l];
      if (topo.vertex(link.from).kind == VertexKind::gpu) up += run.link_bytes[l];
    }
    CHECK(up == Approx(gpus * 2.0 * (gpus - 1) / gpus * size));
    CHECK(memory == Approx(2 * up));
    return 2.0 * (gpus - 1) / gpus * size / run.seconds;  // busbw
  };
  CHECK(run(4, 1000e9) == Approx(64e9).epsilon(1e-6));       // PCIe-bound
  CHECK(run(8, 400e9) == Approx(400e9 / 16).epsilon(1e-6));  // memory-bound: 25 GB/s
}

TEST_CASE("routes never pass through a GPU") {
  const Topology topo = build_cluster(eight_gpu_node(), 2, FabricSpec{});
  for (const VertexId from : topo.gpus()) {
    for (const VertexId to : topo.gpus()) {
      const auto path = topo.route(from, to);
      for (std::size_t i = 0; i + 1 < path.size(); ++i) {
        CHECK(topo.vertex(topo.link(path[i]).to).kind != VertexKind::gpu);
      }
    }
  }
}

TEST_CASE("on an 8-GPU xGMI mesh the rings use all 7 links of every GPU") {
  // 8 GPUs, one 48 GB/s link per pair and direction. Seven channels follow edge-disjoint
  // Hamiltonian cycles, so each of the 56 directed links carries one channel: 2(p-1)/p * S / 7.
  // Each channel runs at 48 GB/s, so busbw = 2(p-1)/p * S / t = 7 x 48 = 336 GB/s, not 48.
  NodeSpec node = eight_gpu_node();
  node.gpu_fabric = GpuFabric::xgmi_mesh;
  node.xgmi_link_bytes_per_s = 48e9;
  node.nics = 0;
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  REQUIRE(collectives.channel_rings(topo.gpus()).size() == 7);
  const double size = 8e9;
  SimTime done_at{};
  collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, topo.gpus(), size,
                       [&] { done_at = engine.now(); });
  engine.run();
  const double busbw = 2.0 * 7 / 8 * size / done_at.seconds();
  CHECK(busbw == Approx(7 * 48e9).epsilon(1e-6));
  int xgmi_links = 0;
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    if (topo.link(l).kind != LinkKind::xgmi) continue;
    ++xgmi_links;
    CHECK(net.link_bytes()[l] == Approx(2.0 * 7 / 8 * size / 7));
  }
  CHECK(xgmi_links == 56);
}

TEST_CASE("NVLS: the switch's reduction bounds its bus bandwidth whatever p, beyond the ring") {
  // 8 GPUs on a reducing NVSwitch, 450 GB/s ports, NVLS efficiency 0.533 (ring efficiency 1 in
  // this bare network). Each port carries S (1 + 1/8) each way, which 450 GB/s would move in
  // S / 400 GB/s; the reduction is slower: busbw = 2 x 0.533 x 450 = 480 GB/s, t = 2 x 7/8 x S
  // / 480 GB/s = 32.8 ms for S = 9 GB, above the 450 GB/s of bus bandwidth a ring can reach.
  const NodeSpec node = nvls_node();
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  const double efficiency = 480.0 / 900.0;
  Collectives collectives(engine, net, topo, CollectiveLatency{},
                          GpuLinkModes{.nvls_efficiency = efficiency, .ring_efficiency = 1.0});
  REQUIRE(collectives.choose(CollectiveOp::all_reduce, topo.gpus(), 1e9).algorithm ==
          CollectiveAlgorithm::nvls);
  CHECK(collectives.choose(CollectiveOp::all_gather, topo.gpus(), 1e9).algorithm ==
        CollectiveAlgorithm::ring);
  const double size = 9e9;
  SimTime done_at{};
  collectives.run(CollectiveOp::all_reduce, topo.gpus(), size, [&] { done_at = engine.now(); });
  engine.run();
  CHECK(2.0 * 7 / 8 * size / done_at.seconds() == Approx(480e9).epsilon(1e-6));
  // The same bus bandwidth on 2 x 8 GPUs of one switch (a GB200 NVL72-like domain of two
  // 8-GPU trays): the reduction, not p, paces it; the ports could carry S (1 + 1/16) at
  // 450 GB/s, a bus bandwidth of 2 x 15/16 / (17/16) x 450 = 794 GB/s.
  NodeSpec tray = node;
  tray.nvlink_domain_nodes = 2;
  const Topology domain = build_cluster(tray, 2, FabricSpec{});
  FlowNetwork net16(engine, line_rates(domain));
  Collectives sixteen(engine, net16, domain, CollectiveLatency{},
                      GpuLinkModes{.nvls_efficiency = efficiency, .ring_efficiency = 1.0});
  const SimTime start = engine.now();
  sixteen.run_with(CollectiveAlgorithm::nvls, CollectiveOp::all_reduce, domain.gpus(), size,
                   [&] { done_at = engine.now(); });
  engine.run();
  CHECK(2.0 * 15 / 16 * size / (done_at - start).seconds() == Approx(480e9).epsilon(1e-6));
}

TEST_CASE("NVLS on few GPUs fills their ports before the switch's reduction binds") {
  // 3 GPUs, 450 GB/s ports, NVLS efficiency 0.533: the reduction would allow busbw 480 GB/s,
  // t_red = 2 x 2/3 x S / 480 GB/s = S / 360 GB/s; the ports carry S (1 + 1/3) each way,
  // t_port = 4/3 S / 450 GB/s = S / 337.5 GB/s, longer: busbw = 2 x 2/3 x 337.5 = 450 GB/s.
  const NodeSpec node = nvls_node();
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  const std::vector<VertexId> three(topo.gpus().begin(), topo.gpus().begin() + 3);
  const double size = 3e9;
  const double seconds =
      run_alone(topo, CollectiveLatency{},
                GpuLinkModes{.nvls_efficiency = 480.0 / 900.0, .ring_efficiency = 1.0},
                CollectiveAlgorithm::nvls, CollectiveOp::all_reduce, three, size)
          .seconds;
  CHECK(seconds == Approx(4.0 / 3 * size / 450e9).epsilon(1e-6));
}

TEST_CASE("no NVLS without a reducing switch or across nodes") {
  NodeSpec node = eight_gpu_node();
  const Topology plain = build_cluster(node, 1, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(plain));
  Collectives on_plain(engine, net, plain, CollectiveLatency{},
                       GpuLinkModes{.nvls_efficiency = 0.533, .ring_efficiency = 1.0});
  CHECK(on_plain.choose(CollectiveOp::all_reduce, plain.gpus(), 1e9).algorithm ==
        CollectiveAlgorithm::ring);
  node.nvls = true;
  const Topology two_nodes = build_cluster(node, 2, FabricSpec{});
  FlowNetwork net2(engine, line_rates(two_nodes));
  Collectives across(engine, net2, two_nodes, CollectiveLatency{},
                     GpuLinkModes{.nvls_efficiency = 0.533, .ring_efficiency = 1.0});
  const auto spanning = across.candidates(CollectiveOp::all_reduce, two_nodes.gpus());
  CHECK(std::find(spanning.begin(), spanning.end(), CollectiveAlgorithm::nvls) == spanning.end());
  // All-gathers and reduce-scatters run as rings only, even where NVLS could: the planner's
  // bound (step_lower_bound_s) adds a node's data-parallel gathers and reductions because rings
  // send out of a node as much as they take in.
  for (const CollectiveOp op : {CollectiveOp::all_gather, CollectiveOp::reduce_scatter}) {
    CHECK(across.candidates(op, two_nodes.gpus()) ==
          std::vector<CollectiveAlgorithm>{CollectiveAlgorithm::ring});
  }
  const std::vector<VertexId> first_node(two_nodes.gpus().begin(), two_nodes.gpus().begin() + 8);
  CHECK(across.choose(CollectiveOp::all_reduce, first_node, 1e9).algorithm ==
        CollectiveAlgorithm::nvls);
}

namespace {

// Time of one collective in channel or chunked form, optionally with a competing flow of
// `competitor_bytes` over `competitor_links` started at the same instant.
double ring_form_seconds(const Topology& topo, const std::vector<VertexId>& ranks, CollectiveOp op,
                         double size, bool chunked,
                         const std::vector<LinkUse>& competitor_links = {},
                         double competitor_bytes = 0) {
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{from_us(5), from_us(2)});
  if (!competitor_links.empty()) {
    net.start_flow(competitor_links, competitor_bytes, SimTime{}, [] {});
  }
  SimTime done_at{};
  auto done = [&] { done_at = engine.now(); };
  if (chunked) {
    collectives.run_ring_chunked(op, ranks, size, done);
  } else {
    collectives.run_with(CollectiveAlgorithm::ring, op, ranks, size, done);
  }
  engine.run();
  return done_at.seconds();
}

}  // namespace

TEST_CASE("channel and chunked forms agree within 2% alone and with competing traffic") {
  // The chunked form sends 2(p-1) chunks of S/p per hop one step at a time; alone, or against a
  // competitor that slows one hop throughout, each step is paced by the same slowest hop that
  // paces the single channel flow, so the two agree; a competitor that leaves midway is where
  // they differ most, and must stay within 2%.
  const Topology ring8 = ideal_ring(8, 100e9, from_us(1));
  const Topology node = build_cluster(eight_gpu_node(), 1, FabricSpec{});
  const Topology two_nodes = build_cluster(eight_gpu_node(), 2, FabricSpec{});
  const LinkId ring_hop = ring8.route(2, 3).front();
  // 4 GPUs staging through 400 GB/s of host memory: memory-bound (50 GB/s busbw).
  const Topology staged = build_cluster(no_p2p_node(4, 400e9), 1, FabricSpec{});
  const LinkId memory_link = staged.staging_of(0)->memory_link;
  // Node 0's NIC 3 towards its leaf: the rail that channel 3 of the two-node ring uses.
  const LinkId nic_uplink = two_nodes
                                .route(*two_nodes.nic_of_gpu(two_nodes.gpus()[3]),
                                       *two_nodes.nic_of_gpu(two_nodes.gpus()[11]))
                                .front();
  struct Check {
    const char* what;
    const Topology* topo;
    std::vector<LinkUse> competitor;
    double competitor_bytes;
  };
  const Check checks[] = {
      {"ideal ring, alone", &ring8, {}, 0},
      {"ideal ring, one hop shared throughout", &ring8, {{ring_hop, 1.0}}, 1e12},
      {"ideal ring, one hop shared for a while", &ring8, {{ring_hop, 1.0}}, 5e8},
      {"NVSwitch node, alone", &node, {}, 0},
      {"two nodes, alone", &two_nodes, {}, 0},
      {"two nodes, one NIC shared for a while", &two_nodes, {{nic_uplink, 1.0}}, 5e8},
      {"no P2P, staged through host memory, alone", &staged, {}, 0},
      {"no P2P, host memory shared for a while", &staged, {{memory_link, 1.0}}, 5e8},
  };
  for (const Check& check : checks) {
    for (const auto op : {CollectiveOp::all_reduce, CollectiveOp::all_gather}) {
      INFO(check.what << ", " << to_string(op));
      const auto& ranks = check.topo->gpus();
      const double channel_form = ring_form_seconds(*check.topo, ranks, op, 1e9, false,
                                                    check.competitor, check.competitor_bytes);
      const double chunked_form = ring_form_seconds(*check.topo, ranks, op, 1e9, true,
                                                    check.competitor, check.competitor_bytes);
      CHECK(chunked_form == Approx(channel_form).epsilon(0.02));
    }
  }
}

TEST_CASE("all-to-all, broadcast and send/recv reach the link rate as busbw on a crossbar") {
  // 8 GPUs on an NVSwitch with 450 GB/s ports, no latency.
  //   all-to-all: 56 flows of S/8; each uplink carries 7 of them, B/7 each: t = (S/8) / (B/7),
  //     busbw = (7/8) S / t = B.
  //   broadcast: one chain flow of S through the switch, each port used once per direction:
  //     t = S / B, busbw = 1 x S / t = B.
  //   send/recv: 8 flows of S, GPU i to GPU i+1, each port used once per direction: busbw = B.
  NodeSpec node = eight_gpu_node();
  node.nics = 0;
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  for (const auto op :
       {CollectiveOp::all_to_all, CollectiveOp::broadcast, CollectiveOp::send_recv}) {
    Engine engine;
    FlowNetwork net(engine, line_rates(topo));
    Collectives collectives(engine, net, topo, CollectiveLatency{});
    const double size = 1e9;
    SimTime done_at{};
    collectives.run(op, topo.gpus(), size, [&] { done_at = engine.now(); });
    engine.run();
    INFO(to_string(op));
    CHECK(bus_factor(op, 8) * size / done_at.seconds() == Approx(450e9).epsilon(1e-6));
  }
}

TEST_CASE("all-to-all across nodes is bounded by the NICs") {
  // 2 nodes x 8 GPUs, 50 GB/s NICs, one per GPU. Each GPU sends S/16 to each of the 8 GPUs of
  // the other node, rail-matched through the NIC with the destination's index: each NIC carries
  // 8 GPUs x S/16 = S/2 per direction at 50 GB/s: t = S / 100 GB/s. NVLink (450 GB/s) carries
  // less and is not the bottleneck.
  const Topology topo = build_cluster(eight_gpu_node(), 2, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  const double size = 16e9;
  SimTime done_at{};
  collectives.run(CollectiveOp::all_to_all, topo.gpus(), size, [&] { done_at = engine.now(); });
  engine.run();
  CHECK(done_at.seconds() == Approx(size / 100e9).epsilon(1e-6));
}

namespace {

Topology mesh_cluster(int gpus, int nodes) {
  NodeSpec node = eight_gpu_node();
  node.gpus = gpus;
  node.pcie_switches = gpus;
  node.gpu_fabric = GpuFabric::xgmi_mesh;
  node.xgmi_link_bytes_per_s = 48e9;
  node.nics = nodes > 1 ? gpus : 0;
  return build_cluster(node, nodes, FabricSpec{});
}

}  // namespace

TEST_CASE("mesh rings use every directed link equally, for every GPU count, every time") {
  // p GPUs fully meshed: the channels' cycles must visit every GPU once and, together, load
  // every directed link by the same number of channels (once for p != 4, 6, where p - 1
  // edge-disjoint cycles exist; (p - 2)! times for 4 and 6, where all cycles are used).
  for (int p = 2; p <= 8; ++p) {
    const Topology topo = mesh_cluster(p, 1);
    Engine engine;
    FlowNetwork net(engine, line_rates(topo));
    Collectives collectives(engine, net, topo, CollectiveLatency{});
    const auto rings = collectives.channel_rings(topo.gpus());
    CHECK(rings == collectives.channel_rings(topo.gpus()));
    std::map<std::pair<VertexId, VertexId>, int> uses;
    for (const auto& ring : rings) {
      std::vector<VertexId> sorted = ring;
      std::sort(sorted.begin(), sorted.end());
      CHECK(sorted == topo.gpus());
      for (std::size_t i = 0; i < ring.size(); ++i) ++uses[{ring[i], ring[(i + 1) % ring.size()]}];
    }
    INFO("p = " << p);
    CHECK(uses.size() == static_cast<std::size_t>(p * (p - 1)));
    const int each = uses.begin()->second;
    for (const auto& [link, count] : uses) CHECK(count == each);
    const int expected_each = (p == 4 || p == 6) ? (p == 4 ? 2 : 24) : 1;
    CHECK(each == expected_each);
  }
}

TEST_CASE("across mesh nodes of any size every NIC carries its share and no xGMI link more") {
  // Two nodes of p meshed GPUs, P = 2p ranks, ring bytes R = 2(P-1)/P * S. Channel c enters a
  // node at GPU c mod p and walks cycle c mod C there (C = p - 1 edge-disjoint cycles, or for p
  // = 4 and 6 all (p-1)! cycles, each directed link in (p-2)! of them), lcm(C, p) channels of
  // R / lcm each. A NIC serves lcm / p channels: R / p. A directed xGMI link lies in C / (p-1)
  // cycles, each walked by lcm / C channels: R / (p-1).
  // With one channel per cycle (7 on 8 GPUs) one NIC of each node would stay idle.
  for (int p = 2; p <= 8; ++p) {
    INFO("p = " << p);
    const Topology topo = mesh_cluster(p, 2);
    Engine engine;
    FlowNetwork net(engine, line_rates(topo));
    Collectives collectives(engine, net, topo, CollectiveLatency{});
    // One node's channels are its cycles.
    const std::vector<VertexId> first_node(topo.gpus().begin(), topo.gpus().begin() + p);
    const std::size_t cycles = collectives.channel_rings(first_node).size();
    CHECK(collectives.channel_rings(topo.gpus()).size() ==
          std::lcm(cycles, static_cast<std::size_t>(p)));
    if (p == 8) CHECK(collectives.channel_rings(topo.gpus()).size() == 56);
    const double size = 1e9;
    collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, topo.gpus(), size,
                         [] {});
    engine.run();
    const double ring_bytes = 2.0 * (2 * p - 1) / (2 * p) * size;
    int xgmi_links = 0;
    int nic_uplinks = 0;
    for (LinkId l = 0; l < topo.link_count(); ++l) {
      const Link& link = topo.link(l);
      if (link.kind == LinkKind::xgmi) {
        ++xgmi_links;
        CHECK(net.link_bytes()[l] == Approx(ring_bytes / (p - 1)));
      }
      if (topo.vertex(link.from).kind == VertexKind::nic &&
          topo.vertex(link.to).kind == VertexKind::leaf_switch) {
        ++nic_uplinks;
        CHECK(net.link_bytes()[l] == Approx(ring_bytes / p));
      }
    }
    CHECK(xgmi_links == 2 * p * (p - 1));
    CHECK(nic_uplinks == 2 * p);
  }
}

TEST_CASE("broadcast spreads over the channels: all mesh links, all NICs") {
  // Mesh: 7 channels of S/7 down 7 edge-disjoint chains at 48 GB/s: t = S / (7 x 48 GB/s).
  // Two switch nodes with 50 GB/s NICs: 8 channels of S/8, each crossing its own NIC once:
  // t = S / (8 x 50 GB/s).
  {
    const Topology mesh = mesh_cluster(8, 1);
    Engine engine;
    FlowNetwork net(engine, line_rates(mesh));
    Collectives collectives(engine, net, mesh, CollectiveLatency{});
    SimTime done_at{};
    collectives.run(CollectiveOp::broadcast, mesh.gpus(), 7e9, [&] { done_at = engine.now(); });
    engine.run();
    CHECK(done_at.seconds() == Approx(7e9 / (7 * 48e9)).epsilon(1e-6));
  }
  {
    const Topology two_nodes = build_cluster(eight_gpu_node(), 2, FabricSpec{});
    Engine engine;
    FlowNetwork net(engine, line_rates(two_nodes));
    Collectives collectives(engine, net, two_nodes, CollectiveLatency{});
    SimTime done_at{};
    collectives.run(CollectiveOp::broadcast, two_nodes.gpus(), 8e9,
                    [&] { done_at = engine.now(); });
    engine.run();
    CHECK(done_at.seconds() == Approx(8e9 / (8 * 50e9)).epsilon(1e-6));
  }
}

TEST_CASE("NVLS on a subset of a node's GPUs and its preconditions") {
  // 4 of 8 GPUs on a reducing switch, NVLS efficiency 0.4: S (1 + 1/4) each way through each of
  // the 4 ports would take 1.25 S / 450 GB/s, the reduction longer: busbw 2 x 0.4 x 450 =
  // 360 GB/s, t = 2 x 3/4 x S / 360 GB/s.
  const NodeSpec node = nvls_node();
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  const std::vector<VertexId> four(topo.gpus().begin(), topo.gpus().begin() + 4);
  CHECK(run_alone(topo, CollectiveLatency{},
                  GpuLinkModes{.nvls_efficiency = 0.4, .ring_efficiency = 1.0},
                  CollectiveAlgorithm::nvls, CollectiveOp::all_reduce, four, 1e9)
            .seconds == Approx(1.5e9 / 360e9).epsilon(1e-6));
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{},
                          GpuLinkModes{.nvls_efficiency = 0.4, .ring_efficiency = 1.0});
  // At that efficiency a ring is faster on 4 GPUs (2 x 3/4 x S / 450 GB/s = 3.3 ms against
  // 4.2 ms): the tuner picks it.
  CHECK(collectives.choose(CollectiveOp::all_reduce, four, 1e9).algorithm ==
        CollectiveAlgorithm::ring);
  Collectives without(engine, net, topo, CollectiveLatency{});
  CHECK_THROWS_AS(
      without.run_with(CollectiveAlgorithm::nvls, CollectiveOp::all_reduce, four, 1e9, [] {}),
      ModelError);
  CHECK_THROWS_AS(collectives.run(CollectiveOp::all_reduce, {four[0], four[0]}, 1e9, [] {}),
                  ModelError);
  // NCCL has no NVLS on two GPUs (ncclNvlsInit: gpuCount <= 2), nor NVLS-tree across nodes of
  // two GPUs each; three are enough.
  const auto has = [&](const std::vector<VertexId>& ranks, CollectiveAlgorithm algorithm) {
    const auto candidates = collectives.candidates(CollectiveOp::all_reduce, ranks);
    return std::find(candidates.begin(), candidates.end(), algorithm) != candidates.end();
  };
  CHECK_FALSE(has({four[0], four[1]}, CollectiveAlgorithm::nvls));
  CHECK_THROWS_AS(collectives.run_with(CollectiveAlgorithm::nvls, CollectiveOp::all_reduce,
                                       {four[0], four[1]}, 1e9, [] {}),
                  ModelError);
  CHECK(has({four[0], four[1], four[2]}, CollectiveAlgorithm::nvls));
  NodeSpec pair_node = eight_gpu_node();
  pair_node.nvls = true;
  const Topology pairs = build_cluster(pair_node, 2, FabricSpec{});
  FlowNetwork pairs_net(engine, line_rates(pairs));
  Collectives across(engine, pairs_net, pairs, CollectiveLatency{},
                     GpuLinkModes{.nvls_efficiency = 0.4, .ring_efficiency = 1.0});
  const auto tree_over = [&](int per_node) {
    std::vector<VertexId> ranks;
    for (int node = 0; node < 2; ++node) {
      for (int i = 0; i < per_node; ++i) ranks.push_back(*pairs.gpu_at(node, i));
    }
    const auto candidates = across.candidates(CollectiveOp::all_reduce, ranks);
    return std::find(candidates.begin(), candidates.end(), CollectiveAlgorithm::nvls_tree) !=
           candidates.end();
  };
  CHECK_FALSE(tree_over(2));
  CHECK(tree_over(3));
}

TEST_CASE("tree all-reduce across two nodes: S per node each way, at NCCL's tree efficiency") {
  // 2 nodes x 8 GPUs with slow 10 GB/s NICs, so the NICs bound everything. Per channel (8) two
  // trees carry S/16 each, inflated by 1/0.92; with two nodes each tree has one edge, so NIC c
  // carries both trees' S/16/0.92 each way: S/8/0.92 at 10 GB/s. busbw = 2 x 15/16 x S / t =
  // 1.875 x 8 x 10 x 0.92 = 138 GB/s, where the NIC-bound ring reaches 8 x 10 = 80.
  NodeSpec node = eight_gpu_node();
  node.nic_bytes_per_s = 10e9;
  const Topology topo = build_cluster(node, 2, FabricSpec{});
  const double size = 16e9;
  auto busbw = [&](CollectiveAlgorithm algorithm) {
    const Run run = run_alone(topo, CollectiveLatency{}, GpuLinkModes{}, algorithm,
                              CollectiveOp::all_reduce, topo.gpus(), size);
    return 2.0 * 15 / 16 * size / run.seconds;
  };
  CHECK(busbw(CollectiveAlgorithm::tree) == Approx(138e9).epsilon(1e-6));
  CHECK(busbw(CollectiveAlgorithm::ring) == Approx(80e9).epsilon(1e-6));
}

TEST_CASE("the tree is held to the library's per-channel limit, and to less at medium sizes") {
  // 2 nodes x 8 GPUs with fast 100 GB/s NICs: unbounded, the tree would reach 1.875 x 8 x 100 x
  // 0.92 = 1380 GB/s. With 20 GB/s per channel for two nodes and a channel per NIC (8), the
  // library's model allows bus bandwidth 160 GB/s, algorithm bandwidth half that: 80 GB/s,
  // which nccl-tests reports as busbw 1.875 x 80 = 150 GB/s. At 256 KiB (64 B x 2^12) the size
  // correction halves it.
  NodeSpec node = eight_gpu_node();
  node.nic_bytes_per_s = 100e9;
  const Topology topo = build_cluster(node, 2, FabricSpec{});
  CollectiveCosts costs = CollectiveCosts::simple_only(SimTime{}, SimTime{});
  costs.gpu_tree_limits = TreeChannelLimits{90, {40e9, 20e9, 10e9}, {40e9, 20e9, 10e9}};
  costs.tree_size_correction[static_cast<int>(Protocol::simple)] = std::vector<double>(13, 1.0);
  costs.tree_size_correction[static_cast<int>(Protocol::simple)][12] = 0.5;
  auto busbw = [&](double size) {
    const Run run = run_alone(topo, costs, GpuLinkModes{}, CollectiveAlgorithm::tree,
                              CollectiveOp::all_reduce, topo.gpus(), size);
    return 2.0 * 15 / 16 * size / run.seconds;
  };
  CHECK(busbw(16e9) == Approx(150e9).epsilon(1e-6));
  CHECK(busbw(64.0 * 4096) == Approx(75e9).epsilon(1e-3));
  CHECK(busbw(64.0 * 8192) == Approx(150e9).epsilon(1e-3));  // beyond the table: no correction
}

TEST_CASE("the tuner picks the tree where it is faster and its limits are known, never without") {
  // The NIC-bound case above: tree 138 GB/s busbw, ring 80. Limits too high to bind.
  NodeSpec node = eight_gpu_node();
  node.nic_bytes_per_s = 10e9;
  const Topology topo = build_cluster(node, 2, FabricSpec{});
  auto choice = [&](const CollectiveCosts& costs, double size) {
    Engine engine;
    FlowNetwork net(engine, line_rates(topo));
    Collectives collectives(engine, net, topo, costs);
    return collectives.choose(CollectiveOp::all_reduce, topo.gpus(), size);
  };
  CollectiveCosts costs = CollectiveCosts::simple_only(SimTime{}, SimTime{});
  CHECK(choice(costs, 16e9).algorithm == CollectiveAlgorithm::ring);
  costs.gpu_tree_limits = TreeChannelLimits{90, {1e12, 1e12, 1e12}, {1e12, 1e12, 1e12}};
  CHECK(choice(costs, 16e9).algorithm == CollectiveAlgorithm::tree);
  // Held to 5 GB/s per channel (busbw 1.875 x 8 x 5 / 2 = 37.5 GB/s) it loses to the ring.
  costs.gpu_tree_limits = TreeChannelLimits{90, {5e9, 5e9, 5e9}, {5e9, 5e9, 5e9}};
  CHECK(choice(costs, 16e9).algorithm == CollectiveAlgorithm::ring);
}

TEST_CASE("the tuner's choice is never slower than any candidate it skipped") {
  // 8 nodes, where the tree's latency (log2 of the nodes) beats the ring's at small sizes and
  // its per-channel limit loses at large ones; the tuner rules candidates out by lower bounds
  // instead of simulating them, which must not change what it finds.
  NodeSpec node = eight_gpu_node();
  node.nic_bytes_per_s = 25e9;
  const Topology topo = build_cluster(node, 8, FabricSpec{});
  CollectiveCosts costs = CollectiveCosts::simple_only(from_us(5), from_us(4));
  costs.gpu_tree_limits = TreeChannelLimits{90, {20e9, 20e9, 20e9}, {20e9, 20e9, 20e9}};
  costs.tree_size_correction[static_cast<int>(Protocol::simple)] = {
      0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.8, 0.7, 0.6, 0.6, 0.5, 0.5, 0.5, 0.5, 0.6, 0.7, 0.8};
  std::map<CollectiveAlgorithm, int> picked;
  for (double size = 1e3; size <= 1e10; size *= 10) {
    INFO("size " << size);
    Engine engine;
    FlowNetwork net(engine, line_rates(topo));
    Collectives collectives(engine, net, topo, costs);
    const CollectiveChoice best = collectives.choose(CollectiveOp::all_reduce, topo.gpus(), size);
    ++picked[best.algorithm];
    const double best_seconds = run_alone(topo, costs, GpuLinkModes{}, best.algorithm,
                                          CollectiveOp::all_reduce, topo.gpus(), size)
                                    .seconds;
    for (const CollectiveAlgorithm other : {CollectiveAlgorithm::ring, CollectiveAlgorithm::tree}) {
      const double seconds =
          run_alone(topo, costs, GpuLinkModes{}, other, CollectiveOp::all_reduce, topo.gpus(), size)
              .seconds;
      CHECK(best_seconds <= seconds);
    }
  }
  CHECK(picked[CollectiveAlgorithm::tree] > 0);  // both win somewhere, or the test shows nothing
  CHECK(picked[CollectiveAlgorithm::ring] > 0);
}

TEST_CASE("point-to-point sends inside a domain run at the p2p efficiency, across nodes not") {
  // Links sized at the ring's efficiency (1 here); with p2p efficiency 0.5 a send/recv or an
  // all-to-all inside the NVSwitch node takes twice as long, and one between nodes (bound by the
  // NICs) is unchanged.
  const Topology one = build_cluster(eight_gpu_node(), 1, FabricSpec{});
  const Topology two = build_cluster(eight_gpu_node(), 2, FabricSpec{});
  const GpuLinkModes half{.ring_efficiency = 1.0, .p2p_efficiency = 0.5};
  for (const auto& [op, algorithm] :
       {std::pair{CollectiveOp::send_recv, CollectiveAlgorithm::pairs},
        std::pair{CollectiveOp::all_to_all, CollectiveAlgorithm::direct}}) {
    INFO(to_string(op));
    const auto seconds = [&](const Topology& topo, const std::vector<VertexId>& ranks,
                             GpuLinkModes modes) {
      return run_alone(topo, CollectiveLatency{}, modes, algorithm, op, ranks, 8e9).seconds;
    };
    CHECK(seconds(one, one.gpus(), half) == Approx(2 * seconds(one, one.gpus(), {})));
    const std::vector<VertexId> across{two.gpus()[0], two.gpus()[8]};  // one GPU per node
    CHECK(seconds(two, across, half) == Approx(seconds(two, across, {})));
  }
}

TEST_CASE("tree latency grows with log2 of the nodes, a ring's with the ranks") {
  // 8 nodes x 8 GPUs, a per-step latency of 10 us above every hop's path latency (0 here),
  // base 5 us, and a message too small to matter. Tree: 5 + 2 x ((8 - 1) + log2 8) x 10 =
  // 205 us. Ring: 5 + 2 x (64 - 1) x 10 = 1265 us.
  const Topology topo = build_cluster(eight_gpu_node(), 8, FabricSpec{});
  auto seconds = [&](CollectiveAlgorithm algorithm) {
    const Run run = run_alone(topo, CollectiveLatency{from_us(5), from_us(10)}, GpuLinkModes{},
                              algorithm, CollectiveOp::all_reduce, topo.gpus(), 64);
    return run.seconds;
  };
  CHECK(seconds(CollectiveAlgorithm::tree) == Approx(205e-6).epsilon(1e-3));
  CHECK(seconds(CollectiveAlgorithm::ring) == Approx(1265e-6).epsilon(1e-3));
}

TEST_CASE("on bridged pairs a ring pays PCIe step latency, a bridged pair NVLink's") {
  // NVLink steps 1 us, PCIe steps 10 us, nothing else; a message too small to matter. Eight
  // GPUs bridged two by two: the ring's hops between pairs cross PCIe, so all its 14 steps
  // count at the PCIe latency (140 us), as NCCL takes the graph's worst link. A ring over one
  // bridged pair: 2 steps over NVLink (2 us).
  NodeSpec node = eight_gpu_node();
  node.gpu_fabric = GpuFabric::nvlink_pairs;
  node.nvlink_bytes_per_s = 300e9;
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  CollectiveCosts costs = CollectiveCosts::simple_only(SimTime{}, SimTime{});
  ProtocolCost& simple = costs.ring[static_cast<int>(Protocol::simple)];
  simple.nvlink_step = from_us(1);
  simple.pcie_step = from_us(10);
  const auto seconds = [&](const std::vector<VertexId>& ranks) {
    return run_alone(topo, costs, GpuLinkModes{}, CollectiveAlgorithm::ring,
                     CollectiveOp::all_reduce, ranks, 64)
        .seconds;
  };
  CHECK(seconds(topo.gpus()) == Approx(140e-6).epsilon(1e-3));
  CHECK(seconds({topo.gpus()[0], topo.gpus()[1]}) == Approx(2e-6).epsilon(1e-3));
}

TEST_CASE("NVLS-tree latency: two switch steps and 2 log2(domains) network steps") {
  // NCCL's model (tuning.cc): the domains are joined by trees. Base 5 us, every step 10 us, a
  // message too small to matter: 5 + 2 x 10 + 2 x floor(log2 d) x 10 = 45, 45, 65 us for 2, 3
  // and 4 domains.
  NodeSpec node = eight_gpu_node();
  node.nvls = true;
  for (const auto& [nodes, expected_us] : {std::pair{2, 45.0}, {3, 45.0}, {4, 65.0}}) {
    INFO(nodes << " domains");
    const Topology topo = build_cluster(node, nodes, FabricSpec{});
    const Run run =
        run_alone(topo, CollectiveLatency{from_us(5), from_us(10)},
                  GpuLinkModes{.nvls_efficiency = 0.7, .ring_efficiency = 1.0},
                  CollectiveAlgorithm::nvls_tree, CollectiveOp::all_reduce, topo.gpus(), 64);
    CHECK(run.seconds == Approx(expected_us * 1e-6).epsilon(1e-3));
  }
}

TEST_CASE("hierarchical all-reduce: three phases in turn, each at its own bottleneck") {
  // 2 nodes x 8 GPUs (450 GB/s NVLink ports, one 50 GB/s NIC per GPU), S = 16 GB, no latency.
  // Reduce-scatter inside each node: 7/8 S over each port, 31.1 ms. All-reduce of each 2 GB
  // shard between the two GPUs of one local index: 2 GB each way through their NICs, 40 ms.
  // All-gather inside each node: 31.1 ms. In all 102.2 ms, slower than the ring's 75 ms, which
  // overlaps NVLink and network: the tuner does not pick it (NCCL has no such algorithm).
  const Topology topo = build_cluster(eight_gpu_node(), 2, FabricSpec{});
  const double size = 16e9;
  const double expected = 2 * (7.0 / 8 * size / 450e9) + size / 8 / 50e9;
  const Run run =
      run_alone(topo, CollectiveLatency{}, GpuLinkModes{}, CollectiveAlgorithm::hierarchical,
                CollectiveOp::all_reduce, topo.gpus(), size);
  CHECK(run.seconds == Approx(expected).epsilon(1e-6));
  for (LinkId l = 0; l < topo.link_count(); ++l) {
    const Link& link = topo.link(l);
    const bool nic_to_leaf = topo.vertex(link.from).kind == VertexKind::nic &&
                             topo.vertex(link.to).kind == VertexKind::leaf_switch;
    if (nic_to_leaf) CHECK(run.link_bytes[l] == Approx(size / 8));  // each shard once each way
  }
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, CollectiveLatency{});
  CHECK(collectives.choose(CollectiveOp::all_reduce, topo.gpus(), size).algorithm !=
        CollectiveAlgorithm::hierarchical);
  // Nodes with unequal GPU counts have no per-rail groups.
  const std::vector<VertexId> twelve(topo.gpus().begin(), topo.gpus().begin() + 12);
  CHECK_THROWS_AS(collectives.run_with(CollectiveAlgorithm::hierarchical, CollectiveOp::all_reduce,
                                       twelve, size, [] {}),
                  ModelError);
}

TEST_CASE("tree depth is floor(log2 nodes), and uneven nodes get no tree") {
  // 3 nodes x 8 GPUs: NCCL's tuner charges log2i(3) = 1 edge each way. Latency with base 5 us and
  // 10 us per step: 5 + 2 x (7 + 1) x 10 = 165 us.
  const Topology three = build_cluster(eight_gpu_node(), 3, FabricSpec{});
  const CollectiveLatency latency{from_us(5), from_us(10)};
  CHECK(run_alone(three, latency, GpuLinkModes{}, CollectiveAlgorithm::tree,
                  CollectiveOp::all_reduce, three.gpus(), 64)
            .seconds == Approx(165e-6).epsilon(1e-3));
  Engine engine;
  FlowNetwork net(engine, line_rates(three));
  Collectives collectives(engine, net, three, latency);
  // 12 ranks on two nodes, 8 + 4: rings still work, the tree's equal chains do not.
  const std::vector<VertexId> twelve(three.gpus().begin(), three.gpus().begin() + 12);
  const auto algorithms = collectives.candidates(CollectiveOp::all_reduce, twelve);
  CHECK(std::find(algorithms.begin(), algorithms.end(), CollectiveAlgorithm::tree) ==
        algorithms.end());
  CHECK_THROWS_AS(
      collectives.run_with(CollectiveAlgorithm::tree, CollectiveOp::all_reduce, twelve, 64, [] {}),
      ModelError);
}

TEST_CASE("an NVLink domain spans trays: 72 GPUs of 18 trays talk over one NVSwitch") {
  // GB200 NVL72-like: 18 trays of 4 GPUs, one NVLink domain. A ring over all 72 GPUs needs no
  // NIC (every hop is GPU -> NVSwitch -> GPU), so its busbw is the NVLink port rate, and NVLS
  // spans the whole domain: at an NVLS efficiency of 0.6 its bus bandwidth, 2 x 0.6 x 900 =
  // 1,080 GB/s, beats the ring's 900, and the tuner picks it.
  NodeSpec tray = nvl72_tray();
  tray.nvls = true;
  const Topology rack = build_cluster(tray, 18, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(rack));
  Collectives collectives(engine, net, rack, CollectiveLatency{},
                          GpuLinkModes{.nvls_efficiency = 0.6, .ring_efficiency = 1.0});
  CHECK(collectives.channel_rings(rack.gpus()).size() == 1);
  CHECK(collectives.choose(CollectiveOp::all_reduce, rack.gpus(), 1e9).algorithm ==
        CollectiveAlgorithm::nvls);
  SimTime done_at{};
  collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, rack.gpus(), 72e9,
                       [&] { done_at = engine.now(); });
  engine.run();
  CHECK(2.0 * 71 / 72 * 72e9 / done_at.seconds() == Approx(900e9).epsilon(1e-6));
  for (LinkId l = 0; l < rack.link_count(); ++l) {
    if (rack.link(l).kind != LinkKind::nvlink) CHECK(net.link_bytes()[l] == 0.0);
  }
}

TEST_CASE("two NVL72 domains: one channel per GPU of a domain, each NIC used once each way") {
  // 36 trays of 4 GPUs in two 72-GPU domains, one 50 GB/s NIC per GPU. 72 channels; channel c
  // enters each domain at its c-th GPU and crosses between domains through that GPU's rail, so
  // each of the 144 NICs carries one channel out and one in: 2(p-1)/p * S / 72 each way.
  const NodeSpec tray = nvl72_tray();
  const Topology racks = build_cluster(tray, 36, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(racks));
  Collectives collectives(engine, net, racks, CollectiveLatency{});
  REQUIRE(collectives.channel_rings(racks.gpus()).size() == 72);
  const double size = 72e9;
  collectives.run_with(CollectiveAlgorithm::ring, CollectiveOp::all_reduce, racks.gpus(), size,
                       [] {});
  engine.run();
  int nic_links = 0;
  for (LinkId l = 0; l < racks.link_count(); ++l) {
    const Link& link = racks.link(l);
    const bool nic_to_leaf = racks.vertex(link.from).kind == VertexKind::nic &&
                             racks.vertex(link.to).kind == VertexKind::leaf_switch;
    const bool leaf_to_nic = racks.vertex(link.to).kind == VertexKind::nic &&
                             racks.vertex(link.from).kind == VertexKind::leaf_switch;
    if (!nic_to_leaf && !leaf_to_nic) continue;
    ++nic_links;
    CHECK(net.link_bytes()[l] == Approx(2.0 * 143 / 144 * size / 72));
  }
  CHECK(nic_links == 2 * 144);
  const auto algorithms = collectives.candidates(CollectiveOp::all_reduce, racks.gpus());
  CHECK(std::find(algorithms.begin(), algorithms.end(), CollectiveAlgorithm::tree) !=
        algorithms.end());
}

TEST_CASE("protocols: LL for small messages, Simple for large, by the library's table") {
  // NCCL's ring all-reduce on 8 GPUs of one NVSwitch (all steps NVLink, 14 of them):
  //   LL      3.6 + 14 x 0.47 = 10.18 us, a quarter of Simple's bandwidth
  //   LL128  10.0 + 14 x 1.9  = 36.6 us, 0.92 of it
  //   Simple  8.4 + 14 x 3.4  = 56.0 us
  // At 8 bytes LL wins on latency; at 1 GB Simple wins on bandwidth.
  CollectiveCosts nccl;
  nccl.ring = {ProtocolCost{from_us(3.6), from_us(0.47), from_us(1.0), from_us(2.7), 0.25},
               ProtocolCost{from_us(10.0), from_us(1.9), from_us(2.5), from_us(4.0), 0.92},
               ProtocolCost{from_us(8.4), from_us(3.4), from_us(5.7), from_us(9.6), 1.0}};
  nccl.tree = nccl.ring;
  NodeSpec node = eight_gpu_node();
  node.nics = 0;
  const Topology topo = build_cluster(node, 1, FabricSpec{});
  Engine engine;
  FlowNetwork net(engine, line_rates(topo));
  Collectives collectives(engine, net, topo, nccl);
  const auto small = collectives.choose(CollectiveOp::all_reduce, topo.gpus(), 8);
  const auto large = collectives.choose(CollectiveOp::all_reduce, topo.gpus(), 1e9);
  CHECK(small.protocol == Protocol::ll);
  CHECK(large.protocol == Protocol::simple);
  SimTime done_at{};
  collectives.run(CollectiveOp::all_reduce, topo.gpus(), 8, [&] { done_at = engine.now(); });
  engine.run();
  // 8 B over LL: 2 x 7/8 x 8 B / (450 GB/s / 4) is 0.12 ns, rounded up to 1 ns; plus 10.18 us.
  CHECK(done_at.seconds() == Approx(10.18e-6 + 1e-9).epsilon(1e-6));
}
