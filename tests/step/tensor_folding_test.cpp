// Folding tensor-parallel ranks (sim/step/folding.hpp): where every tp rank of a group meets
// the cluster as tp rank 0 does, tp rank 0 of replica 0 alone is replayed for its stage, its
// tensor group runs whole and the other tp ranks' data-parallel collectives and pipeline
// transfers run as copies beside it, or are left out where they mirror the replayed traffic.
#include <algorithm>
#include <array>
#include <catch2/catch.hpp>
#include <string>
#include <utility>

#include "common/folded_steps.hpp"
#include "common/small_job.hpp"
#include "sim/step/step_executor.hpp"

using namespace fleetsim;
using fleetsim::testing::folded_and_unfolded;
using fleetsim::testing::link_bytes;
using fleetsim::testing::small_job;

namespace {

// Four 8-GPU nodes on a non-blocking fat tree (one NIC a GPU, each on its own rail), a layout
// of tp x pp x dp filling them (8 KV heads, so that tp 8 divides them).
StepInputs four_nodes(int tp, int pp, int dp) {
  StepInputs in = small_job();
  in.nodes = 4;
  in.model.kv_heads = 8;
  in.plan.tp = tp;
  in.plan.pp = pp;
  in.plan.dp = dp;
  in.plan.zero_stage = 1;
  in.training.global_batch = 8 * dp;
  in.training.micro_batch = 1;
  return in;
}

}  // namespace

TEST_CASE("folding: tp rank 0 stands for its tensor group where the tp ranks sit alike") {
  // Symmetric nodes on a non-blocking fabric: every tp rank's data-parallel ring and pipeline
  // transfers run on its own NIC and rail, at the times tp rank 0's do, so the step is the one
  // every rank replayed gives, to rounding; a stage's tp ranks replayed as one.
  StepInputs overlapped = four_nodes(4, 2, 4);
  overlapped.plan.tp_comm_overlap = true;
  StepInputs interleaved = four_nodes(8, 2, 2);
  interleaved.plan.vpp = 2;
  interleaved.plan.overlap_param_gather = true;
  StepInputs blocking = four_nodes(2, 4, 4);
  blocking.plan.zero_stage = 2;
  for (const StepInputs& in : {overlapped, interleaved, blocking}) {
    CAPTURE(in.plan.tp, in.plan.pp, in.plan.dp, in.plan.vpp, in.plan.zero_stage);
    const auto [folded, unfolded] = folded_and_unfolded(in);
    CHECK(folded.replayed_ranks == in.plan.pp);
    CHECK(unfolded.replayed_ranks == 32);
    CHECK(folded.step_time_s == Approx(unfolded.step_time_s).epsilon(1e-9));
    CHECK(folded.comm_bytes_per_gpu == Approx(unfolded.comm_bytes_per_gpu).epsilon(1e-9));
    CHECK(folded.breakdown.compute_s == Approx(unfolded.breakdown.compute_s).epsilon(1e-9));
    CHECK(folded.breakdown.exposed_comm_s ==
          Approx(unfolded.breakdown.exposed_comm_s).epsilon(1e-6).margin(1e-9));
    // Each replayed rank's kernels are events; the copies' flows are not fewer.
    CHECK(folded.events * 3 < unfolded.events);
  }
}

TEST_CASE("folding: tp ranks that meet the cluster unlike tp rank 0 are each replayed") {
  // Three NICs for eight GPUs: GPUs 0-2 share NIC 0 on PCIe switch 0, but GPU 2 sits on switch
  // 1 and reaches it through the host bridge; GPUs 6-7 share NIC 2 between two. A tp rank's
  // transfers then leave its node otherwise than tp rank 0's.
  StepInputs uneven_nics = four_nodes(4, 2, 4);
  uneven_nics.node.nics = 3;
  // tp 8 over two 4-GPU nodes without an NVLink domain: a tensor group spans nodes.
  StepInputs spanning = four_nodes(8, 1, 2);
  spanning.node.gpus = 4;
  spanning.node.nics = 4;
  spanning.node.pcie_switches = 2;
  // Hash routing: each tp rank's flows collide on the spines in their own way.
  StepInputs hashed = four_nodes(4, 2, 4);
  hashed.fabric.oversubscription = 2;
  hashed.fabric.leaf_ports = 8;
  hashed.fabric.routing = FabricRouting::hash;
  for (const StepInputs& in : {uneven_nics, spanning, hashed}) {
    CAPTURE(in.node.nics, in.node.gpus, static_cast<int>(in.fabric.routing));
    const auto [folded, unfolded] = folded_and_unfolded(in);
    CHECK(folded.replayed_ranks == in.plan.tp * in.plan.pp);  // replica 0's ranks
    CHECK(folded.step_time_s == Approx(unfolded.step_time_s).epsilon(1e-3));
  }
}

namespace {

// The NIC links a step's traffic crossed, as its link usage lists them.
long nic_links(const StepResult& step) {
  return std::count_if(step.links.begin(), step.links.end(),
                       [](const LinkUsage& link) { return link.kind == "infiniband"; });
}

}  // namespace

TEST_CASE("folding: copies that mirror the replayed traffic are left out, the step unchanged") {
  // tp 8 fills each node: tp rank k's data-parallel ring and pipeline transfers cross NIC k
  // alone, and replica j's cross its own nodes' NICs as replica 0's cross theirs, beside the
  // same data-parallel ring. Under ZeRO 1 that ring is a reduce-scatter and an all-gather, so
  // every copy mirrors replayed traffic: none runs, and only tp rank 0's NICs carry any.
  StepInputs in = four_nodes(8, 2, 2);
  in.plan.vpp = 2;
  const auto [mirrored, every_rank] = folded_and_unfolded(in);
  CHECK(mirrored.step_time_s == Approx(every_rank.step_time_s).epsilon(1e-9));
  CHECK(mirrored.comm_bytes_per_gpu == Approx(every_rank.comm_bytes_per_gpu).epsilon(1e-9));
  CHECK(nic_links(every_rank) == 64);  // 8 NICs of 4 nodes, both ways
  CHECK(nic_links(mirrored) == 8);
  // Without the distributed optimizer the gradients are all-reduced, which the tuner may run as
  // a tree, whose ranks do not all meet the fabric alike: the copies run, every NIC is loaded,
  // and the step is the same.
  in.plan.zero_stage = 0;
  const auto [copied, unfolded] = folded_and_unfolded(in);
  CHECK(copied.step_time_s == Approx(unfolded.step_time_s).epsilon(1e-9));
  CHECK(nic_links(copied) == 64);
  // On a 2:1 oversubscribed fabric the pipeline transfers of replicas meet on leaf uplinks: the
  // copies run.
  in.plan.zero_stage = 1;
  in.fabric.oversubscription = 2;
  in.fabric.leaf_ports = 4;
  const auto [shared, all] = folded_and_unfolded(in);
  CHECK(shared.step_time_s == Approx(all.step_time_s).epsilon(1e-3));
  CHECK(nic_links(shared) > 8);
}

TEST_CASE("folding: copies whose routes differ only on links that never bind are left out") {
  // Two-GPU nodes (one NIC a GPU, tp 2) on a non-blocking three-tier fabric of 8-port leaves:
  // 4 nodes a leaf, two leaves (8 nodes) a pod, three pods full. pp 8 x dp 3 on 24 nodes puts
  // stage s of replica r on node 3s + r: from stage 2 to 3, replica 0 (node 6 to 9) crosses the
  // core, replica 2 (node 8 to 11) stays on one leaf. Leaf-spine and spine-core links never bind,
  // so on the links that may (GPU, PCIe, NIC, the NIC's leaf port) every copy still meets what its
  // counterpart meets: none runs, and the step is the one every rank replayed gives.
  StepInputs in = small_job();
  in.node.gpus = 2;
  in.node.nics = 2;
  in.node.pcie_switches = 1;
  in.nodes = 24;
  in.fabric.leaf_ports = 8;
  in.fabric.tiers = 3;
  in.plan.tp = 2;
  in.plan.pp = 8;
  in.plan.dp = 3;
  in.plan.zero_stage = 1;
  in.training.global_batch = 24;
  in.training.micro_batch = 1;
  const auto [mirrored, every_rank] = folded_and_unfolded(in);
  CHECK(mirrored.replayed_ranks == 8);
  CHECK(mirrored.step_time_s == Approx(every_rank.step_time_s).epsilon(1e-9));
  CHECK(mirrored.comm_bytes_per_gpu == Approx(every_rank.comm_bytes_per_gpu).epsilon(1e-9));
  const auto on_rail_1 = [](const StepResult& step) {
    return std::count_if(step.links.begin(), step.links.end(), [](const LinkUsage& link) {
      return link.name.find(".nic1") != std::string::npos;
    });
  };
  CHECK(on_rail_1(every_rank) == 96);  // 24 NICs, to and from their PCIe switch and leaf
  CHECK(on_rail_1(mirrored) == 0);
  // Oversubscribed 3:1, the leaves' uplinks may bind: the core-crossing copies meet there what
  // no counterpart meets, so they run, and the step is still every rank's.
  in.fabric.oversubscription = 3;
  const auto [shared, all] = folded_and_unfolded(in);
  CHECK(shared.step_time_s == Approx(all.step_time_s).epsilon(1e-3));
  CHECK(on_rail_1(shared) > 0);
}

TEST_CASE("folding: where a node holds several replicas, other nodes' copies mirror its own") {
  // tp 4 on 8-GPU nodes: a node holds two replicas of a stage (pp 2 x dp 4 on four nodes, stage
  // 0 on nodes 0 and 1). The data-parallel rings cross NVLink between a node's two replicas,
  // where replica 1's tensor group does too, so replica 0 alone does not mirror the rest; but
  // node 1's replicas meet the cluster as node 0's do, and tp rank k's traffic as tp rank 0's.
  // Node 0's replica 1 runs as a copy beside replica 0 (its tp rank 0's pipeline transfers
  // and its tensor group), the rest is left out: the step is every rank's to rounding, the
  // links of node 0's GPUs 0 and 4 carry what they carry with every rank replayed, and node
  // 1's NVLink carries only the data-parallel ring of tp rank 0 (which runs whole); tp rank
  // 1's traffic, tp rank 0's image, is left out: its GPU's PCIe link carries nothing.
  static constexpr std::array kRunningGpus{"n0.gpu0", "n0.gpu4"};
  StepInputs in = four_nodes(4, 2, 4);
  in.plan.tp_comm_overlap = true;
  const auto [mirrored, every_rank] = folded_and_unfolded(in);
  CHECK(mirrored.replayed_ranks == 2);
  CHECK(mirrored.step_time_s == Approx(every_rank.step_time_s).epsilon(1e-9));
  CHECK(mirrored.comm_bytes_per_gpu == Approx(every_rank.comm_bytes_per_gpu).epsilon(1e-9));
  int running_links = 0;
  for (const LinkUsage& link : every_rank.links) {
    const bool runs = std::any_of(kRunningGpus.begin(), kRunningGpus.end(), [&](const char* gpu) {
      const std::string name(gpu);
      return link.name.rfind(name + "->", 0) == 0 || link.name.ends_with("->" + name);
    });
    if (!runs) continue;
    CAPTURE(link.name);
    CHECK(link_bytes(mirrored, link.name) == Approx(link.bytes).epsilon(1e-9));
    ++running_links;
  }
  CHECK(running_links == 8);  // each GPU's NVLink and PCIe link, both ways
  const std::string node_1_nvlink = "n1.gpu0->n1.nvswitch";
  CHECK(link_bytes(mirrored, node_1_nvlink) > 0);
  CHECK(link_bytes(mirrored, node_1_nvlink) < link_bytes(every_rank, node_1_nvlink));
  const auto pcie_out_of = [](const StepResult& step, const std::string& gpu) {
    double bytes = 0;
    for (const LinkUsage& link : step.links) {
      if (link.kind == "pcie" && link.name.rfind(gpu + "->", 0) == 0) bytes += link.bytes;
    }
    return bytes;
  };
  CHECK(pcie_out_of(every_rank, "n0.gpu1") > 0);
  CHECK(pcie_out_of(mirrored, "n0.gpu1") == 0);
  // With two GPUs a node, one replica fills it: replica 0's copies mirror every other's (tp
  // rank 1's data-parallel ring, node 0's included, is left out).
  StepInputs two_gpu_nodes = four_nodes(2, 1, 4);
  two_gpu_nodes.node.gpus = 2;
  two_gpu_nodes.node.nics = 2;
  two_gpu_nodes.node.pcie_switches = 1;
  const auto [replica_0, all] = folded_and_unfolded(two_gpu_nodes);
  CHECK(replica_0.step_time_s == Approx(all.step_time_s).epsilon(1e-9));
  CHECK(link_bytes(replica_0, "n1.gpu0->n1.nvswitch") < link_bytes(all, "n1.gpu0->n1.nvswitch"));
  CHECK(pcie_out_of(all, "n0.gpu1") > 0);
  CHECK(pcie_out_of(replica_0, "n0.gpu1") == 0);
}
