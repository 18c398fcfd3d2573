// What a node and a fabric are made of, as plain data. Presets are YAML files under
// topology/presets/ (read by the scenario layer); this header only describes the fields.
//
// Units: bandwidths in bytes per second per direction (decimal: 1 GB/s = 1e9 B/s), latencies as
// SimTime. Every preset names its sources, since a preset is a claim about real hardware.
#pragma once

#include <array>
#include <cstdint>
#include <string>

#include "sim/engine/time.hpp"

namespace fleetsim {

enum class GpuFabric {
  nvswitch,   // every GPU has one aggregate port into a non-blocking crossbar (HGX/DGX boards)
  xgmi_mesh,  // every GPU pair has its own link (AMD Infinity Fabric / xGMI on MI300X)
  // NVLink bridges join GPUs 2k and 2k+1 (H100 PCIe, A100 PCIe); other pairs talk over PCIe.
  nvlink_pairs,
  pcie_only  // no GPU links: peer traffic crosses PCIe switches and the host
};

// What the NICs speak; a GPU profile gives each its achievable fraction of line rate. tcpxo:
// Google Cloud's GPUDirect-TCPXO (A3 Mega), TCP offloaded to the NICs through NCCL's net plugin.
enum class NicKind { infiniband, roce, efa, tcpxo };
inline constexpr std::array kNicKinds = {NicKind::infiniband, NicKind::roce, NicKind::efa,
                                         NicKind::tcpxo};

struct NodeSpec {
  std::string name;
  std::string description;
  std::string source;
  std::string gpu_profile;  // calibration profile name, e.g. "h100-sxm"
  int gpus = 8;
  GpuFabric gpu_fabric = GpuFabric::nvswitch;
  // Per GPU per direction, all NVLinks of the GPU together (nvswitch: into the switch;
  // nvlink_pairs: over its bridges to its partner).
  double nvlink_bytes_per_s = 0;
  // Per-link latencies (optional in presets) describe the hardware. Collective timing does not
  // add them up hop by hop: the library's per-step latencies (CollectiveCosts), measured end to
  // end, already include them.
  SimTime nvlink_latency{};  // one traversal GPU -> switch or switch -> GPU
  // Nodes (trays) that share one NVSwitch domain: 1 for an HGX board, 18 for a GB200 NVL72 rack
  // of 4-GPU trays. The domain's GPUs talk over NVLink whatever tray they sit in. A node count
  // that is not a multiple leaves the last domain partly filled, as a partly filled rack is.
  int nvlink_domain_nodes = 1;
  // Whether every group of `size` consecutive GPUs, groups aligned from the first GPU, stays in
  // one NVLink domain: size divides a node's GPUs, or whole nodes of a domain it divides.
  bool nvlink_group_fits(int size) const {
    const int domain = gpus * nvlink_domain_nodes;
    return size >= 1 && (gpus % size == 0 || (size % gpus == 0 && domain % size == 0));
  }
  bool nvls = false;                 // the NVSwitch reduces in the switch (NVLink SHARP)
  double xgmi_link_bytes_per_s = 0;  // xgmi_mesh: each GPU-to-GPU link, per direction
  SimTime xgmi_latency{};
  int pcie_switches = 4;        // GPUs and NICs are spread evenly over them (affinity)
  double pcie_bytes_per_s = 0;  // per GPU (and per NIC) link, per direction
  SimTime pcie_latency{};
  double host_bytes_per_s = 0;  // each PCIe switch to the host, per direction
  // Whether GPUs read and write each other's memory over PCIe. Without (GeForce cards), NCCL
  // stages every transfer in host memory, whose bandwidth (all channels, reads and writes
  // together) then bounds the node.
  bool gpu_p2p = true;
  double host_memory_bytes_per_s = 0;  // peak, all channels of all sockets
  // The fraction of that peak that streaming reads and writes sustain: a property of the host,
  // so the node carries it (GPU profiles carry the efficiencies of the links a GPU drives).
  double host_memory_efficiency = 1;
  // The host as optimizer offload (ZeRO-Offload) uses it: its memory, and its CPU cores (all
  // sockets) at their base clock, each spending cpu_adam_cycles_per_parameter cycles on one
  // parameter's Adam update (tools/microbench/cpu_adam.cpp measures it). 0: not described.
  double host_memory_capacity_bytes = 0;
  int cpu_cores = 0;
  double cpu_clock_hz = 0;
  double cpu_adam_cycles_per_parameter = 0;
  double cpu_cycles_per_s() const { return cpu_cores * cpu_clock_hz; }
  // Whether the preset says all that optimizer offload needs of the host.
  bool describes_host() const {
    return host_memory_bytes_per_s > 0 && host_memory_capacity_bytes > 0 && cpu_cores > 0 &&
           cpu_clock_hz > 0 && cpu_adam_cycles_per_parameter > 0;
  }
  int nics = 8;  // compute NICs of the node
  NicKind nic_kind = NicKind::infiniband;
  double nic_bytes_per_s = 0;  // per NIC per direction (line rate)
  SimTime nic_latency{};
  bool operator==(const NodeSpec&) const = default;
};

enum class FabricKind {
  // Rail-optimised fat tree: NIC r of every node plugs into a leaf of rail r; leaves meet at a
  // spine tier (two tiers) or at pod spines joined by a core tier (three tiers).
  rail_fat_tree
};

// Where the job's nodes sit under the leaves. Collectives order nodes by rank, so this decides
// how many ring hops leave a leaf for the spine.
enum class NodePlacement {
  packed,  // consecutive nodes fill one leaf before the next (a topology-aware scheduler)
  spread   // consecutive nodes on different leaves, round robin (a scheduler that ignores the
           // fabric, at its worst for rings: every hop between nodes crosses the spine)
};

// How switches spread flows over equal-cost paths up the tree.
enum class FabricRouting {
  adaptive,  // each flow's rate split fluidly over all spines (InfiniBand adaptive routing)
  hash       // each flow pinned to one spine by a seeded hash (ECMP), so flows can collide
};

struct FabricSpec {
  FabricKind kind = FabricKind::rail_fat_tree;
  NodePlacement placement = NodePlacement::packed;
  FabricRouting routing = FabricRouting::adaptive;
  std::uint64_t hash_seed = 1;    // hash routing: which flows collide
  double link_bytes_per_s = 0;    // per port per direction; 0 means "as fast as the NIC"
  double oversubscription = 1.0;  // a full leaf's downlink : uplink bandwidth, >= 1
  int leaf_ports = 64;            // switch radix (NDR Quantum-2: 64 ports of 400 Gb/s)
  int tiers = 0;             // 2: leaf-spine; 3: leaf-spine-core with pods; 0: the fewest that fit
  SimTime switch_latency{};  // one switch traversal
  bool operator==(const FabricSpec&) const = default;
};

}  // namespace fleetsim
