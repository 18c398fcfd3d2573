// Simulated nccl-tests / rccl-tests runs against measured logs (calibration/logs/, each with a
// .source.txt saying where it came from). A row is checked when the simulator models the
// algorithm the measured run used; docs/accuracy.md's table lists every log, checked or not.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cmath>
#include <filesystem>
#include <optional>
#include <string>
#include <tuple>

#include "calibration/nccl_log.hpp"
#include "sim/scenario/scenario.hpp"
#include "sim/step/collective_benchmark.hpp"
#include "sim/step/collective_calibration.hpp"
#include "topology/topology.hpp"

using namespace fleetsim;

namespace {

struct Case {
  const char* log;
  const char* node;
  int nodes;
  int ranks;
};

// Large-message bus bandwidth of the log's largest row (out-of-place) and of the simulation.
std::pair<double, double> largest_row_busbw(const Case& c) {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const NcclLog log = read_nccl_log(source + "/calibration/logs/" + c.log);
  const NcclLogRow& row = log.rows.back();
  const StepInputs cluster = load_cluster(DataPaths{source}, c.node, c.nodes);
  const auto simulated =
      benchmark_collective(cluster, CollectiveOp::all_reduce, c.ranks, {row.size_bytes});
  return {row.out_of_place->busbw_gb_per_s, simulated.front().busbw_gb_per_s};
}

// The log's largest row (out-of-place busbw) beside the simulated ring's and the tuner's choice.
struct AgainstRing {
  double measured = 0;
  CollectiveSample ring;
  CollectiveSample tuned;
};
AgainstRing against_ring(const Case& c) {
  const std::string source = FLEETSIM_SOURCE_DIR;
  const NcclLogRow row = read_nccl_log(source + "/calibration/logs/" + c.log).rows.back();
  const StepInputs cluster = load_cluster(DataPaths{source}, c.node, c.nodes);
  const auto run = [&](std::optional<CollectiveAlgorithm> algorithm) {
    return benchmark_collective(cluster, CollectiveOp::all_reduce, c.ranks, {row.size_bytes},
                                algorithm)
        .front();
  };
  return {row.out_of_place->busbw_gb_per_s, run(CollectiveAlgorithm::ring), run(std::nullopt)};
}

}  // namespace

TEST_CASE("ring all-reduce busbw within 10% of measured logs, no parameter fitted to them") {
  // Link efficiencies come from published figures, not from these logs: xGMI 48 of 64 GB/s (AMD
  // ROCm blog), NVLink 3 232 of 300 GB/s (NVIDIA GTC24 S62129 expectation).
  const Case cases[] = {
      {"mi300x8-allreduce-rccl-hisohara-aac8.log", "mi300x-platform", 1, 8},
      {"mi300x8-allreduce-rccl-rocmblog-xgmi.log", "mi300x-platform", 1, 8},
      {"a100x8-allreduce-meta-gcm-fixture.log", "dgx-a100", 1, 8},
      // Two nodes; the fixture does not name its cluster, so DGX A100-like nodes (8x 200 Gb/s
      // HDR) are an assumption. The NICs bound the rail-matched ring: 8 x 25 x 0.96 GB/s.
      {"a100x16-2node-allreduce-meta-gcm-fixture.log", "dgx-a100", 2, 16},
      // Two MI300X nodes; the log's cluster uses 8 RoCE ports of unstated speed, modelled as the
      // preset's 400 Gb/s NICs: the xGMI cycles, not the NICs, bound this ring.
      {"mi300x16-2node-allreduce-rccl-hisohara-aac10.log", "mi300x-platform", 2, 16},
      // Two MI355X nodes, eight 400 Gb/s RoCE NICs each (AMD Pollara 400, as the log's source
      // says): the NICs bound the ring, all eight of them, 8 x 50 x 0.96 GB/s; xGMI (7 x 76.5 x
      // 0.75, MI300X's usable share) would allow 402.
      {"mi355x16-2node-allreduce-rccl-hisohara-aac14-partial.log", "mi355x-platform", 2, 16},
  };
  for (const Case& c : cases) {
    const auto [measured, simulated] = largest_row_busbw(c);
    INFO(c.log << ": measured " << measured << " GB/s, simulated " << simulated << " GB/s");
    CHECK(simulated == Approx(measured).epsilon(0.10));
  }
}

TEST_CASE("NVLS all-reduce on 8 x H100 within 10% of the measured log, above any ring's bound") {
  // The measured single-node H100 run used NVLink SHARP (NCCL's default there): busbw ~474 GB/s,
  // above the 450 GB/s per-direction NVLink rate that bounds every ring. The NVLS efficiency in
  // the profile comes from NVIDIA's expected 480 GB/s (GTC24 S62129), not from this log.
  const auto [measured, simulated] =
      largest_row_busbw({"h100x8-allreduce-nvls-nccltests290.log", "dgx-h100", 1, 8});
  CHECK(measured > 450);
  CHECK(simulated > 450);
  CHECK(simulated == Approx(measured).epsilon(0.02));  // docs/collective-accuracy.md: +1.2%
}

TEST_CASE("NVLS all-reduce on a GB200 NVL72 rack within 5% of the measured log, not fitted") {
  // CoreWeave's one-rack run (coreweave/nccl-tests PR 43): 834.57 GB/s busbw at 8 GiB, about
  // what 8 GPUs of two trays reach (811 measured, lixueduan.com's GB200 MNNVL test): the
  // switch's reduction bounds NVLS's bus bandwidth whatever p is, which these two measurements
  // show (the shape is theirs, not out of sample). The level is: 2 x Blackwell's NVLS
  // efficiency x 900 GB/s, the efficiency H100's (480 GB/s expected on 8 H100, GTC24) times
  // NCCL's 0.74 / 0.85. A model whose bus bandwidth grows with p, as the ports' S (1 + 1/p)
  // alone would, gives 1,044 on 72 (+25%) and fails here.
  const auto [measured, simulated] =
      largest_row_busbw({"gb200x72-nvl72-allreduce-coreweave-partial.log", "gb200-nvl72", 18, 72});
  CHECK(simulated == Approx(measured).epsilon(0.05));
  const StepInputs two_trays = load_cluster(DataPaths{FLEETSIM_SOURCE_DIR}, "gb200-nvl72", 2);
  const double eight =
      benchmark_collective(two_trays, CollectiveOp::all_reduce, 8, {8.0 * (1 << 30)})
          .front()
          .busbw_gb_per_s;
  CHECK(eight == Approx(811).epsilon(0.05));
}

TEST_CASE("NVLS-tree across GB200 NVL72 racks: two within 5% of the measured log, twenty not") {
  // CoreWeave's runs (coreweave/nccl-tests README, NCCL 2.26.2), largest row 16 GiB. Across
  // racks NCCL runs NVLS-tree (no CollNet without SHARP; NVLS alone stays in one domain): 32
  // heads a rack, each carrying S/32 over its NIC. Two racks: 810.41 GB/s busbw measured, the
  // NVLS inside each rack paces it, as on one rack (the heads' NICs, 32 x 48 GB/s usable each
  // carrying S/32 each way, would allow an S/t of 1,536 GB/s).
  // Twenty racks: 405.74 measured, about half; the model stays NVLink-bound (2 S/32 a head's
  // NIC from four racks on is still far from binding) and is 2.1x high, a gap listed in
  // docs/limitations.md: neither NCCL's code nor its tuner halves it.
  const auto rack_pair = against_ring(
      {"gb200x144-2rack-nvl72-allreduce-coreweave-partial.log", "gb200-nvl72", 36, 144});
  CHECK(rack_pair.tuned.algorithm == CollectiveAlgorithm::nvls_tree);
  CHECK(rack_pair.tuned.busbw_gb_per_s == Approx(rack_pair.measured).epsilon(0.05));
  const auto twenty = against_ring(
      {"gb200x1440-20rack-nvl72-allreduce-coreweave-partial.log", "gb200-nvl72", 360, 1440});
  CHECK(twenty.tuned.algorithm == CollectiveAlgorithm::nvls_tree);
  CHECK(twenty.tuned.busbw_gb_per_s / twenty.measured == Approx(2.08).margin(0.05));
}

TEST_CASE("NVLS-tree all-reduce on two AWS p5 nodes within 10% of the measured log") {
  // 2 x p5.48xlarge, 16 ranks, 16 GiB: 487.1 GB/s busbw measured, above the 400 GB/s that the
  // NICs allow any ring. The tuner picks NVLS-tree, which the switch's reduction bounds here (the
  // EFA efficiency would matter only below 0.69: 8 NICs x 50 GB/s x e against 7/8 S / 240 GB/s).
  const std::string source = FLEETSIM_SOURCE_DIR;
  const NcclLog log =
      read_nccl_log(source + "/calibration/logs/h100x16-2node-p5-efa-allreduce-aws-partial.log");
  const NcclLogRow& row = log.rows.back();
  const StepInputs cluster = load_cluster(DataPaths{source}, "aws-p5", 2);
  const auto simulated =
      benchmark_collective(cluster, CollectiveOp::all_reduce, 16, {row.size_bytes});
  CHECK(simulated.front().algorithm == CollectiveAlgorithm::nvls_tree);
  CHECK(row.out_of_place->busbw_gb_per_s > 400);
  const double error = simulated.front().busbw_gb_per_s / row.out_of_place->busbw_gb_per_s - 1;
  CHECK(std::abs(error) < 0.10);
  CHECK(error == Approx(0.056).margin(0.01));  // docs/collective-accuracy.md: +5.6%
}

TEST_CASE("NVLS-tree on two B200 and two H100 nodes beside CoreWeave's published runs") {
  // coreweave/nccl-tests PR 92 (2026-05-26): 8 GiB all-reduce on 2 nodes x 8 GPUs over
  // InfiniBand, 690.07 GB/s busbw on B200 and 440.58 on H100. B200's NICs bound it (8 x 400
  // Gb/s a node): within 10%. H100's NVLS inside each node bounds it at 514, +17%: the two-p5
  // run above (487) is within 6% of the same figure, a spread between clusters of the same
  // nodes that one efficiency cannot follow (docs/collective-accuracy.md lists it).
  const std::string source = FLEETSIM_SOURCE_DIR;
  for (const auto& [node, measured, tolerance] :
       {std::tuple{"dgx-b200", 690.07, 0.10}, {"dgx-h100", 440.58, 0.20}}) {
    INFO(node);
    const StepInputs cluster = load_cluster(DataPaths{source}, node, 2);
    const auto simulated =
        benchmark_collective(cluster, CollectiveOp::all_reduce, 16, {8.0 * (1 << 30)});
    CHECK(simulated.front().algorithm == CollectiveAlgorithm::nvls_tree);
    CHECK(simulated.front().busbw_gb_per_s == Approx(measured).epsilon(tolerance));
  }
}

TEST_CASE("NVLS all-reduce on 8 x H100 within 10% of Azure's published sweep") {
  // Azure ND H100 v5, NCCL 2.18.5, in-place NVLS all-reduce: 478.87 GB/s busbw at 8 GiB
  // (Azure/AI-benchmarking-guide ND_H100_v5_results.md, 'NCCL Bandwidth'). A second machine
  // beside the nccl-tests issue 290 log; nothing was fitted to either. On Azure's own preset.
  const StepInputs cluster = load_cluster(DataPaths{FLEETSIM_SOURCE_DIR}, "azure-nd-h100-v5", 1);
  const auto simulated =
      benchmark_collective(cluster, CollectiveOp::all_reduce, 8, {8.0 * (1 << 30)});
  // docs/accuracy.md quotes +0.2%; 2% pins that without tracking the last digit.
  CHECK(simulated.front().busbw_gb_per_s == Approx(478.87).epsilon(0.02));
}

TEST_CASE("out of sample: all-gather and reduce-scatter on 8 x H100 against XLA's table") {
  // openxla/xla collective_interpolator_data.h, key sm_90, groups of 8 (published figures):
  // network_throughput_bytes_per_sec of all-gather at 512 MiB, 1 and 2 GiB gathered, and of
  // reduce-scatter at 256 MiB .. 2 GiB reduced (32 .. 256 MiB shards x 8), read as nccl-tests'
  // algbw (S / time; the field's meaning is not documented). The NVLink efficiency comes from
  // NVIDIA's all-reduce figure (370 GB/s busbw), nothing from these. All-gather lands within
  // 10% (+5..7%); reduce-scatter runs 12..16% over: the ring moves its bytes like an all-gather,
  // and the reduction's cost on the GPU is not modelled (docs/limitations.md).
  const StepInputs cluster = load_cluster(DataPaths{FLEETSIM_SOURCE_DIR}, "dgx-h100", 1);
  const double mib = 1 << 20;
  const std::tuple<CollectiveOp, double, double, double> rows[] = {
      {CollectiveOp::all_gather, 512 * mib, 384.032229267, 0.074},
      {CollectiveOp::all_gather, 1024 * mib, 391.036278245, 0.068},
      {CollectiveOp::all_gather, 2048 * mib, 400.124397805, 0.050},
      {CollectiveOp::reduce_scatter, 256 * mib, 347.901791639, 0.157},
      {CollectiveOp::reduce_scatter, 2048 * mib, 373.842693108, 0.124},
  };
  for (const auto& [op, size, xla_gb_per_s, readme_error] : rows) {
    INFO(to_string(op) << " " << size / mib << " MiB");
    const double algbw = benchmark_collective(cluster, op, 8, {size}).front().algbw_gb_per_s;
    const double error = algbw / xla_gb_per_s - 1;
    CHECK(error == Approx(readme_error).margin(0.01));
    if (op == CollectiveOp::all_gather) CHECK(std::abs(error) < 0.10);
  }
}

TEST_CASE("RTX 5090 without P2P: a user's 8- and 4-GPU Xeon reports within 10%") {
  // NVIDIA/nccl issue 1639: 8x RTX 5090 on two Xeon 8480+ (8 channels of DDR5-4800 each, 614.4
  // GB/s together), 28 GB/s busbw at 1-8 GB, 35 GB/s with 4 GPUs. With 8 GPUs host memory
  // bounds the ring (16 memory passes per bus byte), with 4 the PCIe links do. Nothing was
  // fitted to these figures: PCIe efficiency from a P2P-disabled copy benchmark, memory
  // efficiency assumed. The preset's own host (one Genoa, nccl-tests issue 287) is over-predicted
  // by 37% (docs/accuracy.md).
  const std::string source = FLEETSIM_SOURCE_DIR;
  StepInputs xeon = load_cluster(DataPaths{source}, "rtx5090-workstation", 1);
  xeon.node.host_memory_bytes_per_s = 2 * 8 * 38.4e9;
  for (const auto& [gpus, measured] : {std::pair{8, 28.0}, std::pair{4, 35.0}}) {
    INFO(gpus << " GPUs");
    xeon.node.gpus = xeon.node.pcie_switches = gpus;
    const auto simulated = benchmark_collective(xeon, CollectiveOp::all_reduce, gpus, {4e9});
    CHECK(simulated.front().busbw_gb_per_s == Approx(measured).epsilon(0.10));
  }
  const auto [genoa_measured, genoa_simulated] =
      largest_row_busbw({"rtx5090x4-pcie-allreduce-nccltests287.log", "rtx5090-workstation", 1, 4});
  CHECK(genoa_simulated / genoa_measured - 1 == Approx(0.37).margin(0.02));
}

TEST_CASE("two AWS p4de nodes: the tuner picks NCCL's tree, within 10%, beyond any ring's bound") {
  // aws-samples/awsome-distributed-training: 78.33 GB/s busbw at 2 GiB on 2 x p4de (4 x 100
  // Gb/s EFA per node). A ring cannot beat the 50 GB/s of NICs per node; the double binary
  // tree moves half as much per node, and its per-channel limit (4 channels x 23.6 GB/s for
  // Ampere on two nodes) does not bind, so the tuner runs it. The profile's EFA efficiency is
  // fitted to this log (0.929): the ring's shortfall and the tuner's choice are the checks.
  const auto [measured, ring, tuned] =
      against_ring({"a100x16-2node-p4de-efa-allreduce-aws-partial.log", "aws-p4de", 2, 16});
  CHECK(ring.busbw_gb_per_s < 50);
  CHECK(measured > 50);
  CHECK(ring.busbw_gb_per_s / measured - 1 ==
        Approx(-0.41).margin(0.01));  // docs/collective-accuracy.md
  CHECK(tuned.algorithm == CollectiveAlgorithm::tree);
  const double tree_error = tuned.busbw_gb_per_s / measured - 1;
  CHECK(std::abs(tree_error) < 0.10);
  CHECK(tree_error == Approx(0.013).margin(0.01));  // docs/collective-accuracy.md: +1.3%
}

TEST_CASE("two GCP A3 Mega nodes: NCCL's tree over GPUDirect-TCPXO, beyond any ring's bound") {
  // A user's nccl-tests run on 2 x a3-megagpu-8g (calibration/logs/, its .source.txt), under
  // Google's TCPXO profile (NVLS off, Ring and Tree): 338.8 GB/s busbw at 8 GiB over 8 x 200
  // Gb/s a node. A ring's channels cross the nodes through all eight NICs, 200 GB/s a node,
  // which bounds its busbw; the tree moves half as much across two nodes, so only it reaches
  // the measurement. It is held to NCCL's per-channel tree limit for Hopper on two nodes
  // (tuning.cc), 9% under the log: TCPXO's efficiency does not enter (the profile's 0.95, or
  // anything from 0.90 up, gives the same).
  const auto [measured, ring, tuned] =
      against_ring({"h100x16-2node-allreduce-gcp-a3mega.log", "gcp-a3-mega", 2, 16});
  CHECK(ring.busbw_gb_per_s < 200);
  CHECK(measured > 200);
  CHECK(tuned.algorithm == CollectiveAlgorithm::tree);
  CHECK(tuned.busbw_gb_per_s / measured - 1 == Approx(-0.092).margin(0.01));  // -9.2%
}

TEST_CASE("PCIe presets reach their analytic ring bounds") {
  // No measured logs for these boxes yet; the bounds follow from the presets alone.
  //   8x L40S, two GPUs per Gen4 switch, P2P: each ring crosses every switch's 32 GB/s uplink
  //     once each way, at the PCIe efficiency: busbw = 32 x 0.80 = 25.6 GB/s.
  //   8x RTX 4090, no P2P: min(PCIe 32 x 0.59, host memory 409.6 x 0.80 / 16) = 18.9 GB/s.
  const std::string source = FLEETSIM_SOURCE_DIR;
  const StepInputs l40s = load_cluster(DataPaths{source}, "l40s-server", 1);
  CHECK(benchmark_collective(l40s, CollectiveOp::all_reduce, 8, {8e9}).front().busbw_gb_per_s ==
        Approx(25.6).epsilon(0.01));
  const StepInputs rtx4090 = load_cluster(DataPaths{source}, "rtx4090-server", 1);
  CHECK(benchmark_collective(rtx4090, CollectiveOp::all_reduce, 8, {8e9}).front().busbw_gb_per_s ==
        Approx(std::min(32 * 0.59, 409.6 * 0.80 / 16)).epsilon(0.01));
  //   8x H100 PCIe bridged in pairs: a ring over all eight crosses PCIe between pairs, so the
  //     Gen5 links bound it (64 x 0.80 = 51.2 GB/s); over one bridged pair it runs at NVLink
  //     speed (300 x 0.822 = 246.6 GB/s; a 2-rank all-reduce's bus factor is 1).
  const StepInputs h100_pcie = load_cluster(DataPaths{source}, "h100-pcie-server", 1);
  CHECK(
      benchmark_collective(h100_pcie, CollectiveOp::all_reduce, 8, {8e9}).front().busbw_gb_per_s ==
      Approx(64 * 0.80).epsilon(0.01));
  CHECK(
      benchmark_collective(h100_pcie, CollectiveOp::all_reduce, 2, {8e9}).front().busbw_gb_per_s ==
      Approx(300 * 0.822).epsilon(0.01));
}

TEST_CASE("the simulator's bus factors are the ones the log reader checks logs with") {
  // Both follow nccl-tests doc/PERFORMANCE.md; one maps CollectiveOp, the other the op names
  // the tools print.
  const std::pair<CollectiveOp, const char*> ops[] = {
      {CollectiveOp::all_reduce, "all_reduce"}, {CollectiveOp::reduce_scatter, "reduce_scatter"},
      {CollectiveOp::all_gather, "all_gather"}, {CollectiveOp::all_to_all, "alltoall"},
      {CollectiveOp::broadcast, "broadcast"},   {CollectiveOp::send_recv, "sendrecv"}};
  for (const auto& [op, name] : ops) {
    for (const int ranks : {2, 8, 16, 512}) {
      INFO(name << " on " << ranks << " ranks");
      CHECK(bus_factor(op, ranks) == Approx(nccl_bus_factor(name, ranks)));
    }
  }
}

namespace {

// A log as nccl-tests would print it for the simulator's own timings.
NcclLog synthetic_log(const StepInputs& cluster, int ranks, const std::vector<double>& sizes,
                      CollectiveOp op = CollectiveOp::all_reduce) {
  NcclLog log;
  log.file = "(synthetic)";
  // As nccl-tests names its programs (all_reduce_perf, alltoall_perf, sendrecv_perf, ...).
  log.op = op == CollectiveOp::send_recv    ? "sendrecv"
           : op == CollectiveOp::all_to_all ? "alltoall"
                                            : to_string(op);
  for (const CollectiveSample& sample : benchmark_collective(cluster, op, ranks, sizes)) {
    NcclLogRow row;
    row.size_bytes = sample.size_bytes;
    row.out_of_place = NcclTiming{sample.time_us, sample.algbw_gb_per_s, sample.busbw_gb_per_s, {}};
    log.rows.push_back(row);
  }
  return log;
}

}  // namespace

TEST_CASE("a fit recovers the efficiency and latency that generated the data") {
  // Data from the simulator with xGMI efficiency 0.6 and RCCL's latencies; fitted starting from
  // a profile that says 0.75. For these sizes the tuner runs Simple, so the model is exactly
  // y = L + x / e and the fit is exact: e = 0.6, and L = RCCL's ring/Simple base plus 14 xGMI
  // steps (calibration/collectives/rccl.yaml) = 27.9 + 14 x 2.7 = 65.7 us.
  const std::string source = FLEETSIM_SOURCE_DIR;
  StepInputs truth = load_cluster(DataPaths{source}, "mi300x-platform", 1);
  truth.gpu.link_efficiency["xgmi"].value = 0.6;
  const NcclLog log = synthetic_log(truth, 8, {64e6, 256e6, 1e9, 4e9});
  for (const CollectiveSample& sample :
       benchmark_collective(truth, CollectiveOp::all_reduce, 8, {64e6})) {
    CHECK(sample.protocol == Protocol::simple);
  }
  const StepInputs start = load_cluster(DataPaths{source}, "mi300x-platform", 1);
  const CollectiveFit fit = fit_collective_log(start, log, {.ranks = 8});
  CHECK(fit.parameter == "link_efficiency.xgmi");
  CHECK(fit.efficiency == Approx(0.6).epsilon(1e-4));
  CHECK(fit.latency_us == Approx(27.9 + 14 * 2.7).epsilon(1e-3));
  CHECK(fit.max_abs_error < 1e-4);
}

TEST_CASE("a fit of an NVLS or NVLS-tree log recovers the switch-reduction efficiency") {
  // NVLS inside one H100 box, and NVLS-tree across two p5 nodes, where the switch's reduction
  // still bounds the run (at 0.6 it allows 540 GB/s of bus bandwidth, the ports 576): both fit
  // nvls_efficiency, with the library's latencies and protocol
  // bandwidths left as they are in the ideal runs.
  const std::string source = FLEETSIM_SOURCE_DIR;
  for (const auto& [preset, nodes, algorithm] :
       {std::tuple{"dgx-h100", 1, CollectiveAlgorithm::nvls},
        std::tuple{"aws-p5", 2, CollectiveAlgorithm::nvls_tree}}) {
    INFO(preset << " x " << nodes);
    StepInputs truth = load_cluster(DataPaths{source}, preset, nodes);
    truth.gpu.nvls_efficiency->value = 0.6;
    const int ranks = 8 * nodes;
    const NcclLog log = synthetic_log(truth, ranks, {256e6, 1e9, 4e9, 16e9});
    const StepInputs start = load_cluster(DataPaths{source}, preset, nodes);
    const CollectiveFit fit = fit_collective_log(start, log, {.ranks = ranks});
    CHECK(fit.algorithm == to_string(algorithm));
    CHECK(fit.parameter == "nvls_efficiency");
    CHECK(fit.efficiency == Approx(0.6).epsilon(0.01));
  }
}

TEST_CASE("a fit of an NVLS log whose ports, not the switch, bound it is refused") {
  // NVLS on 4 H100s: the ports carry S (1 + 1/4) at 0.822 x 450 GB/s, a bus bandwidth of 444
  // GB/s, below the 480 the switch's reduction allows at 0.533; any efficiency above about 0.49
  // gives the same run, so the log cannot tell it (a fit would stop at 1).
  const std::string source = FLEETSIM_SOURCE_DIR;
  const StepInputs cluster = load_cluster(DataPaths{source}, "dgx-h100", 1);
  const NcclLog log = synthetic_log(cluster, 4, {256e6, 1e9, 4e9, 16e9});
  try {
    fit_collective_log(cluster, log, {.ranks = 4});
    FAIL("the fit was not refused");
  } catch (const ModelError& error) {
    CHECK_THAT(error.what(), Catch::Contains("not the switch's reduction, bound this NVLS run"));
  }
}

TEST_CASE("a fit of a send/recv log recovers the point-to-point efficiency") {
  // 8 x A100 sending to their neighbours over NVSwitch: NVLink bounds the run, at the profile's
  // p2p efficiency, which the fit recovers whatever the profile said before.
  const std::string source = FLEETSIM_SOURCE_DIR;
  StepInputs truth = load_cluster(DataPaths{source}, "dgx-a100", 1);
  truth.gpu.p2p_efficiency->value = 0.55;
  const NcclLog log = synthetic_log(truth, 8, {128e6, 512e6, 2e9, 8e9}, CollectiveOp::send_recv);
  StepInputs start = load_cluster(DataPaths{source}, "dgx-a100", 1);
  start.gpu.p2p_efficiency.reset();  // as a profile without the entry
  const CollectiveFit fit = fit_collective_log(start, log, {.ranks = 8});
  CHECK(fit.parameter == "p2p_efficiency");
  CHECK(fit.efficiency == Approx(0.55).epsilon(1e-4));
  // All-to-all inside the node is point-to-point sends too: its log fits the same parameter,
  // not the ring's NVLink efficiency (which would not move its time).
  const NcclLog all_to_all =
      synthetic_log(truth, 8, {128e6, 512e6, 2e9, 8e9}, CollectiveOp::all_to_all);
  const CollectiveFit a2a =
      fit_collective_log(load_cluster(DataPaths{source}, "dgx-a100", 1), all_to_all, {.ranks = 8});
  CHECK(a2a.parameter == "p2p_efficiency");
  CHECK(a2a.efficiency == Approx(0.55).epsilon(1e-4));
}

TEST_CASE("8 x A100 send/recv: the point-to-point efficiency is the published log's") {
  // sendrecv_perf -g 8, 128 MiB .. 1 GiB: 110.81, 188.6, 192.75, 195.1 GB/s (third-party log,
  // li-plus/playground cuda/nccl.md; published figures). The profile's p2p efficiency was set
  // from the 1 GiB row, so that row checks only the arithmetic; the 256 and 512 MiB rows follow
  // from it within 3% (the 128 MiB row, at 58% of the rest, is not followed by any latency the
  // library's tables give). At the ring's NVLink efficiency the 1 GiB row would be 18% over.
  const StepInputs cluster = load_cluster(DataPaths{FLEETSIM_SOURCE_DIR}, "dgx-a100", 1);
  const double mib = 1 << 20;
  for (const auto& [size, measured] :
       {std::pair{256 * mib, 188.6}, std::pair{512 * mib, 192.75}, std::pair{1024 * mib, 195.1}}) {
    INFO(size / mib << " MiB");
    const auto simulated = benchmark_collective(cluster, CollectiveOp::send_recv, 8, {size});
    CHECK(simulated.front().busbw_gb_per_s == Approx(measured).epsilon(0.03));
  }
  StepInputs ring_efficiency = cluster;
  ring_efficiency.gpu.p2p_efficiency.reset();
  const double without =
      benchmark_collective(ring_efficiency, CollectiveOp::send_recv, 8, {1024 * mib})
          .front()
          .busbw_gb_per_s;
  CHECK(without / 195.1 - 1 == Approx(0.18).margin(0.02));
}

TEST_CASE("out of sample: xGMI fitted on one MI300X log predicts another within 2%") {
  // Fit on hisohara's AAC8 rows of 64 MiB and up; predict the ROCm blog's 16 GiB busbw (a
  // different machine and RCCL build). The fit lands at 0.707, below AMD's stated 48 of 64 GB/s.
  const std::string source = FLEETSIM_SOURCE_DIR;
  StepInputs cluster = load_cluster(DataPaths{source}, "mi300x-platform", 1);
  const NcclLog fitted_on =
      read_nccl_log(source + "/calibration/logs/mi300x8-allreduce-rccl-hisohara-aac8.log");
  const CollectiveFit fit =
      fit_collective_log(cluster, fitted_on, {.ranks = 8}, std::nullopt, 64 << 20);
  CHECK(fit.efficiency == Approx(0.707).epsilon(0.01));
  cluster.gpu.link_efficiency["xgmi"].value = fit.efficiency;
  const NcclLog other =
      read_nccl_log(source + "/calibration/logs/mi300x8-allreduce-rccl-rocmblog-xgmi.log");
  const NcclLogRow& row = other.rows.back();
  const auto predicted =
      benchmark_collective(cluster, CollectiveOp::all_reduce, 8, {row.size_bytes});
  CHECK(predicted.front().busbw_gb_per_s == Approx(row.out_of_place->busbw_gb_per_s).epsilon(0.02));
}

TEST_CASE(
    "every shipped preset with NICs all-reduces across two nodes, within what its NICs carry") {
  // Between two nodes (NVLink domains) an all-reduce of S bytes must carry at least S out of each
  // node (each half of the result needs the other node's contribution to it, and the node's share
  // of the other half must leave it), so t >= S / (nics x rate x efficiency) and the bus bandwidth,
  // 2(p-1)/p S / t, is at most 2(p-1)/p x the node's usable NIC rate. Every preset must also
  // carry its NIC kind in its GPU profile: `run` refuses a link kind the profile cannot rate.
  const std::string source = FLEETSIM_SOURCE_DIR;
  int presets = 0;
  for (const auto& entry : std::filesystem::directory_iterator(source + "/topology/presets")) {
    const std::string name = entry.path().stem().string();
    CAPTURE(name);
    const NodeSpec node = load_cluster(DataPaths{source}, name, 1).node;
    if (node.nics == 0) continue;
    // Two nodes in one NVLink domain (GB200 trays) reach each other over NVLink instead: two
    // of its domains apart.
    const StepInputs cluster = load_cluster(DataPaths{source}, name, 2 * node.nvlink_domain_nodes);
    const auto efficiency =
        cluster.gpu.link_efficiency.find(to_string(fabric_link_kind(cluster.node.nic_kind)));
    REQUIRE(efficiency != cluster.gpu.link_efficiency.end());
    // The two domains' GPUs; a domain sends through all its nodes' NICs.
    const int ranks = cluster.nodes * node.gpus;
    const double size = 1 << 30;
    const CollectiveSample sample =
        benchmark_collective(cluster, CollectiveOp::all_reduce, ranks, {size}).front();
    const double usable = node.nvlink_domain_nodes * node.nics * node.nic_bytes_per_s *
                          efficiency->second.value / 1e9;  // GB/s
    CHECK(sample.busbw_gb_per_s > 0);
    CHECK(sample.busbw_gb_per_s <= 2.0 * (ranks - 1) / ranks * usable * (1 + 1e-9));
    ++presets;
  }
  CHECK(presets == 20);  // all but the two GeForce boxes, which have no NICs
}
